"""`dapo-ops validate`: the job checked offline — verl's real config composed with the overrides through Hydra,
the arithmetic verl does not check, and an HBM estimate per NPU. Pure, except for reading the config files."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from dapo_ops.job.checkpoints import CheckpointPolicy, policy
from dapo_ops.job.composed import Folded, fold, read
from dapo_ops.job.compose import ConfigSources, compose
from dapo_ops.job.memory import (CHECKPOINT_KEYS, HBM_KEYS, HOST_KEYS, checkpoint_estimate, hbm_estimate,
                                 hbm_problems, host_memory_estimate, safe)
from dapo_ops.job.model_facts import model_facts, with_facts
from dapo_ops.job.npu_env import env_problems
from dapo_ops.job.overrides import extra_override_problems, overrides
from dapo_ops.job.placement import world_size
from dapo_ops.job.secrets import missing_secrets
from dapo_ops.job.spec import JobSpec, SpecError
from dapo_ops.job.verl_checks import verl_checks
from dapo_ops.manifest import StackManifest
from dapo_ops.fleet.ssh import QUICK

PROJECT_RECIPE = Path(__file__).parent / "recipe"


@dataclass
class Validation:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    hbm: dict[str, float] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)     # host memory per node (GiB)
    checkpoint: dict[str, float] = field(default_factory=dict)   # disk per saved step (GiB)
    saving: CheckpointPolicy | None = None                       # what verl will read (None: the spec's is invalid)
    composed: dict | None = None


def config_sources(verl_checkout: Path | None, manifest: StackManifest) -> ConfigSources:
    recipe_rel = Path(manifest.source("verl").extra["recipe_config"])
    if verl_checkout is not None:
        trainer = verl_checkout / "verl" / "trainer" / "config"
        recipe = verl_checkout / recipe_rel.parent
        if not (trainer / "ppo_trainer.yaml").exists() or not (recipe / recipe_rel.name).exists():
            raise SpecError(f"{verl_checkout} is not a verl checkout with {recipe_rel} (--verl-checkout)")
        return ConfigSources(trainer, recipe, f"verl checkout {verl_checkout}")
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pin = manifest.source("verl").version
        raise SpecError(f"verl's configuration is not installed: pip install --no-deps verl=={pin} hydra-core "
                        "(or pass --verl-checkout DIR)")
    trainer = Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"
    return ConfigSources(trainer, PROJECT_RECIPE, f"verl {importlib.metadata.version('verl')} wheel + the project's "
                                                  "description of the DAPO recipe")


def recipe_from_head(head, manifest: StackManifest, workdir: Path) -> ConfigSources:
    """The DAPO recipe's configuration read from the head node's verl checkout over SSH (host key verified)."""
    import shlex

    from dapo_ops.errors import SSHError
    from dapo_ops.fleet.ssh import run_on

    verl = manifest.source("verl")
    remote = f"{head.layout.src_root}/{verl.dir}/{verl.extra['recipe_config']}"
    result = run_on(head, f"cat {shlex.quote(remote)}", timeout=QUICK)
    if result.failure is not None:
        raise SSHError(result.error)
    if result.exit_code != 0:
        raise SpecError(f"{head.name} has no {remote} (provision the verl layer first): {result.stderr.strip()}")
    recipe_dir = workdir / "recipe"
    recipe_dir.mkdir(parents=True, exist_ok=True)
    (recipe_dir / Path(remote).name).write_text(result.stdout)
    base = config_sources(None, manifest)
    return ConfigSources(base.trainer_config, recipe_dir, f"{base.described.split(' + ')[0]} + {head.name}:{remote}")


def _not_positive(spec: JobSpec, n) -> list[str]:
    c, d, a, act, r = spec.cluster, spec.data, spec.algorithm, spec.actor, spec.rollout
    positive = {"cluster.nodes": c.nodes, "cluster.npus_per_node": c.npus_per_node,
                "actor.ulysses_sequence_parallel_size": act.ulysses_sequence_parallel_size,
                "rollout.tensor_parallel_size": r.tensor_parallel_size,
                "data.train_batch_size": d.train_batch_size, "data.gen_batch_size": d.gen_batch_size,
                "algorithm.ppo_mini_batch_size": a.ppo_mini_batch_size, "algorithm.n_responses": a.n_responses,
                "data.max_prompt_length": d.max_prompt_length, "data.max_response_length": d.max_response_length,
                "actor.max_token_len_per_npu": act.max_token_len_per_npu}
    return [f"{n(k)} must be a positive number" for k, v in positive.items() if v <= 0]


def _parallelism(spec: JobSpec, world: int, n) -> list[str]:
    c, sp, tp = spec.cluster, spec.actor.ulysses_sequence_parallel_size, spec.rollout.tensor_parallel_size
    errors = []
    if world % sp:
        errors.append(f"{n('actor.ulysses_sequence_parallel_size')} {sp} does not divide the world size {world} "
                      f"({c.nodes} x {c.npus_per_node})")
    if world % tp:
        errors.append(f"{n('rollout.tensor_parallel_size')} {tp} does not divide the world size {world}")
    if c.npus_per_node % tp:
        errors.append(f"{n('rollout.tensor_parallel_size')} {tp} does not divide {n('cluster.npus_per_node')} "
                      f"{c.npus_per_node} (a vLLM TP group must stay inside a node)")
    return errors


def _batches(spec: JobSpec, world: int, n) -> list[str]:
    d, a, sp = spec.data, spec.algorithm, spec.actor.ulysses_sequence_parallel_size
    gen, train, mini = n("data.gen_batch_size"), n("data.train_batch_size"), n("algorithm.ppo_mini_batch_size")
    errors = []
    if d.gen_batch_size < d.train_batch_size:
        errors.append(f"{gen} {d.gen_batch_size} is smaller than {train} {d.train_batch_size}: DAPO generates at "
                      "least one training batch of prompts per round")
    if d.train_batch_size < a.ppo_mini_batch_size:
        errors.append(f"{mini} {a.ppo_mini_batch_size} is larger than {train} {d.train_batch_size}")
    elif d.train_batch_size % a.ppo_mini_batch_size:
        errors.append(f"{train} {d.train_batch_size} is not a multiple of {mini} {a.ppo_mini_batch_size}")
    dp = world // sp if world % sp == 0 else None
    if dp and (a.ppo_mini_batch_size * a.n_responses) % dp:
        errors.append(f"{mini} x {n('algorithm.n_responses')} = {a.ppo_mini_batch_size * a.n_responses} does not "
                      f"split over the {dp} data-parallel ranks (world {world} / SP {sp}), as verl requires")
    return errors


def _lengths(spec: JobSpec, n) -> list[str]:
    d, act, sp = spec.data, spec.actor, spec.actor.ulysses_sequence_parallel_size
    errors = []
    if sp > 1 and not spec.model.use_remove_padding:
        errors.append(f"{n('actor.ulysses_sequence_parallel_size')} > 1 needs {n('model.use_remove_padding')}: true")
    total = d.max_prompt_length + d.max_response_length
    if total > spec.model.architecture.max_position_embeddings:
        errors.append(f"{n('data.max_prompt_length')} + {n('data.max_response_length')} = {total} exceeds the model's "
                      f"max_position_embeddings {spec.model.architecture.max_position_embeddings}")
    budget = n("actor.max_token_len_per_npu")
    if act.use_dynamic_bsz and act.max_token_len_per_npu * sp < total:
        errors.append(f"{budget} x SP = {act.max_token_len_per_npu * sp} cannot hold one {total}-token sequence: "
                      f"raise {budget} to >= {-(-total // sp)}")
    return errors


def _pinned_verl(spec: JobSpec, manifest: StackManifest, n) -> list[str]:
    verl = manifest.source("verl")
    removed_in = str(verl.extra["rules"]["rollout_sync_removed_in"])
    if spec.rollout.mode == "sync" and Version(verl.version) >= Version(removed_in):
        return [f"{n('rollout.mode')} 'sync' was removed in verl {removed_in} (the pinned verl is {verl.version}): "
                "use 'async'"]
    return []


def arithmetic(spec: JobSpec, manifest: StackManifest, names: dict[str, str] | None = None) -> list[str]:
    """What verl does not check before the NPUs are allocated. `spec` is placed on the inventory (placement.place):
    its nodes and NPUs per node are the ones the job will get. `validate` passes the spec folded with the composed
    configuration (composed.fold) and `names`: the verl key of each field an override changed, for the messages."""
    def n(path: str) -> str:
        return (names or {}).get(path, path)

    not_positive = _not_positive(spec, n)
    if not_positive:
        return not_positive
    world = world_size(spec)
    return (_parallelism(spec, world, n) + _batches(spec, world, n) + _lengths(spec, n)
            + _pinned_verl(spec, manifest, n) + missing_secrets(spec))


def saving_as_composed(spec: JobSpec, composed: dict | None) -> CheckpointPolicy | None:
    """The spec's checkpoint policy with the step count and the number kept that verl will read (an extra override
    may change them)."""
    try:
        saving = policy(spec)
    except SpecError:
        return None
    save_freq = read(composed, "trainer.save_freq", saving.save_freq)
    keep = read(composed, "trainer.max_actor_ckpt_to_keep", saving.keep)
    if (save_freq, keep) == (saving.save_freq, saving.keep) or not isinstance(save_freq, int):
        return saving
    return CheckpointPolicy(save_freq, keep if isinstance(keep, int) else saving.keep, None, None)


def validate(spec: JobSpec, manifest: StackManifest, sources: ConfigSources,
             model_config: Path | None = None) -> Validation:
    """Every check on a job placed on the inventory (placement.place), on the values verl will read: the composed
    configuration's (composed.fold) with the model's facts (model_facts), then verl's own checks run offline and the
    ones reproduced from verl and vLLM (verl_checks). Without a composed configuration, the spec's own values."""
    result = Validation(errors=extra_override_problems(spec))
    try:
        if not result.errors:  # Hydra's own parse error would not say which override it is
            result.composed = compose(sources, overrides(spec, manifest))
    except SpecError as exc:
        result.errors.append(str(exc))
    folded = fold(spec, result.composed) if result.composed is not None else Folded(spec)
    facts = model_facts(folded.spec, result.composed, model_config)
    checked = with_facts(folded.spec, facts)
    result.errors += folded.problems + arithmetic(checked, manifest, folded.names)
    if result.composed is not None:
        result.errors += verl_checks(folded, result.composed, facts)
    result.errors += env_problems(spec, result.composed)
    result.hbm = safe(hbm_estimate, HBM_KEYS, checked, int(manifest.platform["hbm_mb"]))
    sleeps = bool(read(result.composed, "actor_rollout_ref.rollout.enable_sleep_mode", True))
    result.host = safe(host_memory_estimate, HOST_KEYS, checked, sleeps)
    result.checkpoint = safe(checkpoint_estimate, CHECKPOINT_KEYS, checked)
    result.saving = saving_as_composed(spec, result.composed)
    hbm_errors, hbm_warnings = hbm_problems(result.hbm, checked)
    result.errors += hbm_errors
    result.warnings += facts.warnings + hbm_warnings
    return result
