"""The job's checkpoint policy (pure): how often verl saves, how many steps it keeps, and where.

verl (at the pinned tag) saves in `recipe/dapo/dapo_ray_trainer.py` (fit, lines 364-368) when `trainer.save_freq > 0` and the step
is the last one or a multiple of save_freq: save_freq <= 0 saves nothing, not even at the end. The spec asks for
either a step count (`trainer.save_freq`) or minutes of training (`trainer.save_every_minutes`, 60 when neither is
given); minutes become steps with a step time estimated from the seed's throughput, rounded down so that the work a
failure loses stays within the minutes asked for.

`trainer.max_actor_ckpt_to_keep` prunes (verl/utils/checkpoint/fsdp_checkpoint_manager.py save_checkpoint, lines
204-214): rank 0 deletes the oldest `global_step_M/actor` *before* writing the new step, so keeping 1 leaves no
complete step while a save is in flight; 2 is the least that always leaves one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dapo_ops.job.placement import world_size
from dapo_ops.job.spec import JobSpec
from dapo_ops.job.typed import SpecError
from dapo_ops.model.seed import SEED_TOKENS_PER_S_PER_NPU

DEFAULT_SAVE_MINUTES = 60.0


@dataclass(frozen=True)
class CheckpointPolicy:
    save_freq: int                    # trainer.save_freq
    keep: int                         # trainer.max_actor_ckpt_to_keep
    minutes: float | None             # the bound asked for (None: the spec gave save_freq)
    step_seconds: float | None        # the step time estimate the minutes were turned into steps with

    @property
    def saves(self) -> bool:
        return self.save_freq > 0

    def as_json(self) -> dict:
        return {"save_freq": self.save_freq, "keep": self.keep, "save_every_minutes": self.minutes,
                "step_seconds_estimate": self.step_seconds}

    def describe(self) -> str:
        if not self.saves:
            return f"trainer.save_freq {self.save_freq}: verl saves no checkpoint, not even at the last step"
        every = "every step" if self.save_freq == 1 else f"every {self.save_freq} steps"
        why = (f" (trainer.save_every_minutes {self.minutes:g} at an estimated {self.step_seconds / 60:.0f} min per "
               "step)" if self.minutes is not None and self.step_seconds is not None else "")
        return f"saved {every}{why}, the last {self.keep} kept"


def tokens_per_step(spec: JobSpec) -> float:
    """The tokens one step trains: train_batch_size prompts x n responses, each sequence taken as the whole prompt
    and half the response budget (a run's mean response grows during training; this is no measurement)."""
    d = spec.data
    return d.train_batch_size * spec.algorithm.n_responses * (d.max_prompt_length + d.max_response_length / 2)


def step_seconds_estimate(spec: JobSpec) -> float:
    """A step's wall time at the seed's throughput per NPU (its 12,800 tokens/s on 32 NPUs, verl's perf/throughput:
    trained tokens / (step time x NPUs)). The seed's own 1.2 s per step cannot hold its batch (1.2 s x 12,800 tokens/s
    is fewer tokens than two of its 8,192 sequences), so the throughput is the figure used."""
    return tokens_per_step(spec) / (SEED_TOKENS_PER_S_PER_NPU * world_size(spec))


def policy(spec: JobSpec) -> CheckpointPolicy:
    """The placed spec's checkpoint policy; SpecError naming the field for a value verl would misread."""
    t = spec.trainer
    if t.keep_checkpoints < 1:
        raise SpecError(f"trainer.keep_checkpoints: {t.keep_checkpoints} keeps no step; keep at least 2 (verl prunes "
                        "before it saves, so 1 leaves none complete while a save is written)")
    if t.save_freq is not None:
        if t.save_every_minutes is not None:
            raise SpecError("trainer.save_freq and trainer.save_every_minutes: give one of them (steps or minutes)")
        if t.save_freq == 0 or t.save_freq < -1:
            raise SpecError(f"trainer.save_freq: {t.save_freq} is not a step count: give N >= 1, or -1 to save no "
                            "checkpoint")
        return CheckpointPolicy(t.save_freq, t.keep_checkpoints, None, None)
    minutes = DEFAULT_SAVE_MINUTES if t.save_every_minutes is None else t.save_every_minutes
    if not minutes > 0 or math.isinf(minutes):
        raise SpecError(f"trainer.save_every_minutes: {minutes:g} must be a number of minutes above 0")
    seconds = step_seconds_estimate(spec)
    return CheckpointPolicy(max(1, math.floor(minutes * 60 / seconds)), t.keep_checkpoints, minutes, seconds)


def checkpoint_root(spec: JobSpec, chain: str | None = None) -> str:
    """trainer.default_local_dir. verl's default is relative (checkpoints/<project>/<experiment>), i.e. inside the
    verl checkout of whichever node writes; here an absolute path per job, and per chain of launch attempts when
    launched (the first attempt's run id), so a new run never resumes, or prunes, another run's steps."""
    t = spec.trainer
    return f"{t.checkpoint_dir}/{t.project_name}/{t.experiment_name}" + (f"/{chain}" if chain else "")


@dataclass(frozen=True)
class CheckpointRun:
    """Where a launched attempt keeps its steps, and the step it resumes from (None: a new chain)."""

    chain: str
    resume_step: int | None = None


def run_pairs(spec: JobSpec, run: CheckpointRun | None) -> list[tuple[str, object]]:
    """The overrides for a launched attempt: the chain's directory, and verl's resume mode. A new chain disables
    resuming (its directory is new); a resume names its step (`resume_path`), so verl does not pick a newer step that
    is not complete on every node, which `auto` would (verl/trainer/ppo/ray_trainer.py _load_checkpoint, lines
    1007-1062: the tracker file names the step, and only the folder's existence is checked)."""
    if run is None:
        return [("trainer.default_local_dir", checkpoint_root(spec))]
    root = checkpoint_root(spec, run.chain)
    pairs: list[tuple[str, object]] = [("trainer.default_local_dir", root)]
    if run.resume_step is None:
        return pairs + [("trainer.resume_mode", "disable")]
    return pairs + [("trainer.resume_mode", "resume_path"),
                    ("trainer.resume_from_path", f"{root}/global_step_{run.resume_step}")]
