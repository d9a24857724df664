"""Writes the report's log fixtures, one per variant of verl's step line, from the documented formats (verl v0.7.0
verl/utils/logger/aggregate_logger.py concat_dict_to_str; recipe/dapo/dapo_ray_trainer.py; verl/utils/tracking.py
FileLogger; Ray's actor prefix). Not copied from any log. Run from the repository root:

    python tests/data/report/make_fixtures.py

Every variant carries the same three training steps (STEPS), so each one must give the same numbers
(tests/unit/test_report_*.py assert them, computed by hand in the comments there).
"""

from __future__ import annotations

import json
import pprint
from pathlib import Path

HERE = Path(__file__).resolve().parent
CYAN, DIM, RESET = "\x1b[36m", "\x1b[2m", "\x1b[0m"

# step -> (step s, gen, old_log_prob, ref, update_actor, tokens, score, response length, clip ratio, entropy,
#          gen batches, mfu)
STEPS = {
    1: (100.0, 60.0, 10.0, 5.0, 20.0, 320000, -0.5, 1000.0, 0.1, 0.5, 1, 0.2),
    2: (200.0, 140.0, 20.0, 10.0, 25.0, 480000, 0.0, 1200.0, 0.2, 0.4, 2, 0.3),
    3: (150.0, 100.0, 15.0, 10.0, 20.0, 600000, 0.25, 1100.0, 0.0, 0.3, 1, 0.25),
}
NPUS = 32


class NumpyScalar:
    """How a numpy ≥ 2 scalar reprs (and so pprints): np.float64(0.5), np.int64(3)."""

    def __init__(self, kind: str, value):
        self.kind, self.value = kind, value

    def __repr__(self) -> str:
        return f"np.{self.kind}({self.value!r})"


def metrics(step: int, numpy2: bool = False) -> dict:
    """One DAPO step's metrics in verl's insertion order (a subset of the keys; docs: shared reference §5)."""
    t, gen, old, ref, update, tokens, score, length, clip, entropy, batches, mfu = STEPS[step]
    f = (lambda v: NumpyScalar("float64", v)) if numpy2 else (lambda v: v)
    i = (lambda v: NumpyScalar("int64", v)) if numpy2 else (lambda v: v)
    return {
        "actor/entropy": f(entropy), "actor/pg_loss": f(-0.0123), "actor/pg_clipfrac": f(0.0042),
        "actor/grad_norm": f(0.31), "perf/mfu/actor": f(mfu), "perf/max_memory_allocated_gb": f(41.5),
        "actor/lr": 1e-06, "critic/score/mean": f(score), "critic/score/max": f(1.0), "critic/score/min": f(-1.0),
        "response_length/mean": f(length), "response_length/max": f(20480.0), "response_length/min": f(12.0),
        "response_length/clip_ratio": f(clip), "prompt_length/mean": f(180.5), "prompt_length/max": i(512),
        "timing_s/start_profile": 3.1e-05, "timing_s/gen": gen, "timing_s/generate_sequences": gen - 1.5,
        "timing_s/reward": 2.0, "timing_s/old_log_prob": old, "timing_s/ref": ref, "timing_s/adv": 1.0,
        "timing_s/update_actor": update, "timing_s/step": t, "timing_s/stop_profile": 2.5e-05,
        "timing_per_token_ms/gen": f(gen * 1000 / tokens), "perf/total_num_tokens": tokens, "perf/time_per_step": t,
        "perf/throughput": tokens / (t * NPUS), "train/num_gen_batches": batches,
    }


def step_line(step: int, values: dict) -> str:
    """concat_dict_to_str: numbers only, each through pprint.pformat, joined by " - "."""
    return " - ".join([f"step:{step}"] + [f"{k}:{pprint.pformat(v)}" for k, v in values.items()
                                          if not isinstance(v, str)])


def ray(line: str, actor: str = "TaskRunner", pid: int = 4242, colour: bool = True, ip: str | None = None) -> str:
    prefix = f"({actor} pid={pid}" + (f", ip={ip}" if ip else "") + ")"
    return (f"{DIM}{CYAN}{prefix}{RESET} {line}" if colour else f"{prefix} {line}") + "\n"


def tqdm_bar(done: int, total: int = 3) -> str:
    return f"\rTraining Progress:  {100 * done // total}%|{'█' * done}{' ' * (total - done)}| {done}/{total} " \
           f"[0{done}:40<0{total - done}:20, 100.00s/it]"


NOISE = [
    ray("INFO 12-01 10:00:00 [executor_base.py:113] # npu blocks: 24000", actor="WorkerDict", pid=5151, ip="10.0.0.2"),
    ray("num_prompt_in_batch=96 < prompt_bsz=128"),
    ray("num_gen_batches=1. Keep generating..."),
    ray("saving global_step:2 - not a step line", colour=False),
    "2026-12-01 10:00:01,000\tINFO worker.py:1888 -- Connected to Ray cluster.\n",
]


def pprinted(label: str, values: dict, prefix: dict, interleaved: str = "") -> str:
    """The trainer's pprint(f"{label} validation metrics: {val_metrics}"): a str, wrapped as a run of literals;
    `interleaved`, another actor's line, comes in after its first line."""
    lines = [ray(line, **prefix) for line in pprint.pformat(f"{label} validation metrics: {values}").splitlines()]
    return "".join(lines[:1]) + interleaved + "".join(lines[1:])


VALIDATION = {0: 0.125, 2: 0.25, 3: 0.375}


def val_metrics(step: int, numpy2: bool = False) -> dict:
    f = (lambda v: NumpyScalar("float64", v)) if numpy2 else (lambda v: v)
    return {"val-core/math_dapo/acc/mean@1": f(VALIDATION[step]), "val-aux/math_dapo/score/mean@1": f(-0.75),
            "val-aux/math_dapo/reward/mean@1": f(-0.75), "val-aux/math_dapo/acc/best@4/mean": f(0.5)}


def plain() -> str:
    """numpy < 2 values, the TaskRunner's coloured prefix, Ray and vLLM lines in between."""
    return "".join(NOISE[i % len(NOISE)] + ray(step_line(s, metrics(s))) for i, s in enumerate(STEPS))


def numpy2() -> str:
    """numpy ≥ 2: np.float64(x) / np.int64(x) values; the actor on another node (`ip=`)."""
    return "".join(ray(step_line(s, metrics(s, numpy2=True)), ip="10.0.0.3") for s in STEPS)


def main_task() -> str:
    """Older verl: the driver task `main_task` prints, no colour."""
    return "".join(ray(step_line(s, metrics(s)), actor="main_task", colour=False) for s in STEPS)


def tqdm_glued() -> str:
    """The progress bar shares the stream: redraws (\\r) and a step line glued right after the bar."""
    out = ""
    for s in STEPS:
        out += ray(tqdm_bar(s - 1) + tqdm_bar(s - 1) + step_line(s, metrics(s)))
    return out + ray(tqdm_bar(3)) + "\n"


def validation() -> str:
    """val_before_train (a pprinted dump and a step-0 line), a test_freq validation merged into steps 2 and 3,
    the final dump, and the checkpoint-only line after the last step."""
    prefix = {"pid": 4242}
    out = pprinted("Initial", val_metrics(0), prefix) + ray(step_line(0, val_metrics(0)))
    for s in STEPS:
        values = metrics(s)
        if s in VALIDATION:
            values = {**values, "timing_s/testing": 3.0, **val_metrics(s)}
        out += ray(step_line(s, values))
        if s == 2:
            out += ray("INFO interleaved line from another actor", actor="WorkerDict", pid=777)
    out += pprinted("Final", val_metrics(3, numpy2=True), prefix, interleaved=NOISE[0])
    return out + ray(step_line(4, {"timing/save_checkpoint": 12.5}))


def resume() -> tuple[str, str]:
    """Two attempts: the first dies after a step 3 that the second (resumed from step 2's checkpoint) redoes."""
    slow = {**metrics(3), "timing_s/step": 999.0}
    first = ray(step_line(1, metrics(1))) + ray(step_line(2, metrics(2))) + ray(step_line(3, slow))
    second = ray(step_line(2, val_metrics(2))) + ray(step_line(3, metrics(3)))
    return first, second


def jsonl() -> str:
    """verl's FileLogger: one {"step", "data"} per log call; the last write cut short."""
    lines = [json.dumps({"step": s, "data": metrics(s)}) for s in STEPS]
    return "\n".join(lines) + '\n{"step": 4, "data": {"actor/entr'


def dry_mode() -> str:
    """dapo-ops' sim stand-in (dapo_sim/standin_dapo.py) without training time: step 0 alone, no perf metrics."""
    return ray("step:0 - dapo_ops/dry_mode:1 - dapo_ops/model_layers:48 - dapo_ops/nnodes:2 - "
               "dapo_ops/n_gpus_per_node:16")


def no_steps() -> str:
    return "".join(NOISE) + ray(tqdm_bar(0))


def main() -> None:
    first, second = resume()
    files = {"plain.log": plain(), "numpy2.log": numpy2(), "main_task.log": main_task(),
             "tqdm_glued.log": tqdm_glued(), "validation.log": validation(), "resume-1.log": first,
             "resume-2.log": second, "metrics.jsonl": jsonl(), "dry_mode.log": dry_mode(), "no_steps.log": no_steps()}
    for name, text in files.items():
        (HERE / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
