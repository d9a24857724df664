"""The numbers of a run's report, from its parsed steps (pure; JSON-ready dicts).

Where verl's numbers come from (verl v0.7.0 verl/trainer/ppo/metric_utils.py compute_throughout_metrics and
recipe/dapo/dapo_ray_trainer.py): `timing_s/step` is a step's wall time and, in DAPO, adds up every generation
round the group filter asked for; `perf/total_num_tokens` counts the trained batch's tokens; `perf/throughput` is
total_num_tokens / (step time × NPUs), so the NPU count is their quotient. Tokens/s here is
total_num_tokens / timing_s/step, summed over the steps before dividing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from dapo_ops.model.seed import SEED_NPUS, SEED_STEP_TIME_S, SEED_TOKENS_PER_S, SEED_TOKENS_PER_S_PER_NPU
from dapo_ops.report.steps import STEP_TIME, RunMetrics

TOKENS = "perf/total_num_tokens"
THROUGHPUT = "perf/throughput"
MFU = "perf/mfu/actor"
# the 910B's bf16 peak that verl's MFU is measured against (v0.7.0 verl/utils/flops_counter.py, "910B"/"Ascend910")
PEAK_TFLOPS_910B = 354.0
# the parts of a step's time; update_weights has a timer only in verl's trainer after the pinned tag (verl main
# verl/trainer/ppo/ray_trainer.py, marked_timer("update_weights")): absent from runs of the pinned verl
SPLIT = ("gen", "old_log_prob", "ref", "update_actor", "update_weights")
TRACKED = {
    "score": "critic/score/mean",
    "response_length": "response_length/mean",
    "response_clip_ratio": "response_length/clip_ratio",
    "entropy": "actor/entropy",
    "num_gen_batches": "train/num_gen_batches",
    "mfu_actor": MFU,
}
EXPECTED = (STEP_TIME, TOKENS, THROUGHPUT, *(f"timing_s/{part}" for part in SPLIT), *TRACKED.values())
VALIDATION_PREFIX = "val-core/"
SEED = {"name": "seed", "step_time_s": SEED_STEP_TIME_S, "tokens_per_s": SEED_TOKENS_PER_S, "npus": SEED_NPUS,
        "tokens_per_s_per_npu": SEED_TOKENS_PER_S_PER_NPU}


def percentile(values: Iterable[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks (numpy's default), q in [0, 1]."""
    ordered = sorted(values)
    if not ordered:
        return None
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def stats(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"first": values[0], "last": values[-1], "median": percentile(values, 0.5), "min": min(values),
            "max": max(values), "mean": sum(values) / len(values), "count": len(values)}


def training_steps(run: RunMetrics) -> list[tuple[int, dict[str, float]]]:
    """The steps that trained (they have a step time); validation-only and checkpoint-only lines are left out."""
    return [(step, metrics) for step, metrics in run.ordered() if STEP_TIME in metrics]


def series(steps: list[tuple[int, dict[str, float]]], key: str) -> list[float]:
    return [metrics[key] for _, metrics in steps if key in metrics and not math.isnan(metrics[key])]


def infer_npus(steps: list[tuple[int, dict[str, float]]]) -> int | None:
    counts = [round(m[TOKENS] / (m[STEP_TIME] * m[THROUGHPUT])) for _, m in steps
              if m.get(TOKENS) and m.get(STEP_TIME) and m.get(THROUGHPUT)]
    return round(percentile(counts, 0.5)) if counts else None


def throughput(steps: list[tuple[int, dict[str, float]]], npus: int | None) -> dict | None:
    timed = [(m[TOKENS], m[STEP_TIME]) for _, m in steps if TOKENS in m and m[STEP_TIME] > 0]
    if not timed:
        return None
    overall = sum(t for t, _ in timed) / sum(s for _, s in timed)
    per_step = [t / s for t, s in timed]
    return {"overall": overall, "median": percentile(per_step, 0.5), "npus": npus,
            "per_npu": overall / npus if npus else None}


def other_time(metrics: dict[str, float]) -> float:
    return max(0.0, metrics[STEP_TIME] - sum(metrics.get(f"timing_s/{part}", 0.0) for part in SPLIT))


def time_split(steps: list[tuple[int, dict[str, float]]]) -> dict:
    """Per part: its median seconds and its share of all steps' time; `other` is the rest of each step (reward,
    advantages, validation, checkpoints, what no timer covers)."""
    total = sum(m[STEP_TIME] for _, m in steps)
    split = {}
    for part in SPLIT:
        values = [m.get(f"timing_s/{part}") for _, m in steps]
        if any(v is not None for v in values):
            present = [v for v in values if v is not None]
            split[part] = {"median": percentile(present, 0.5), "share": sum(present) / total if total else None}
    other = [other_time(m) for _, m in steps]
    if steps:
        split["other"] = {"median": percentile(other, 0.5), "share": sum(other) / total if total else None}
    return split


def validation(run: RunMetrics) -> dict:
    """Per val-core metric: its first, last and best value with their steps; plus the pprinted dumps."""
    found: dict[str, list[tuple[int, float]]] = {}
    for step, metrics in run.ordered():
        for key, value in metrics.items():
            if key.startswith(VALIDATION_PREFIX):
                found.setdefault(key, []).append((step, value))
    scores = {key: {"first": points[0], "last": points[-1], "best": max(points, key=lambda p: p[1])}
              for key, points in found.items()}
    return {"scores": scores, "dumps": run.validation}


def missing(run: RunMetrics) -> list[str]:
    seen = {key for _, metrics in run.ordered() for key in metrics}
    gone = [key for key in EXPECTED if key not in seen]
    if not any(key.startswith(VALIDATION_PREFIX) for key in seen) and not run.validation:
        gone.append(f"{VALIDATION_PREFIX}*")
    return gone


def summarize(run: RunMetrics, npus: int | None = None) -> dict:
    """The report's numbers; `npus` when known (else inferred from perf/throughput)."""
    steps = training_steps(run)
    step_times = series(steps, STEP_TIME)
    npus = npus or infer_npus(steps)
    tracked = {name: stats(series(steps, key)) for name, key in TRACKED.items()}
    mfu = tracked["mfu_actor"]
    return {
        "sources": run.sources,
        "steps": {"trained": len(steps), "first": steps[0][0] if steps else None,
                  "last": steps[-1][0] if steps else None, "logged": len(run.steps), "lines": run.lines,
                  "replayed": run.replayed, "unreadable_jsonl_lines": run.unreadable_lines},
        "step_time_s": {"median": percentile(step_times, 0.5), "p90": percentile(step_times, 0.9),
                        "mean": sum(step_times) / len(step_times), "total": sum(step_times)} if step_times else None,
        "tokens_per_s": throughput(steps, npus),
        "mfu": {"actor_median": mfu["median"], "peak_tflops": PEAK_TFLOPS_910B,
                "actor_tflops_per_npu": mfu["median"] * PEAK_TFLOPS_910B} if mfu else None,
        "time_split": time_split(steps),
        "metrics": tracked,
        "validation": validation(run),
        "missing": missing(run),
    }


def baseline_from_summary(summary: dict, name: str) -> dict:
    tokens = summary.get("tokens_per_s") or {}
    step_time = summary.get("step_time_s") or {}
    return {"name": name, "step_time_s": step_time.get("median"), "tokens_per_s": tokens.get("overall"),
            "npus": tokens.get("npus"), "tokens_per_s_per_npu": tokens.get("per_npu")}


def compare(summary: dict, baseline: dict) -> dict:
    """This run against a baseline: each figure, the baseline's, and run / baseline (for step time, lower is
    better; for tokens/s, higher)."""
    run = baseline_from_summary(summary, "run")
    rows = {}
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_npu", "npus"):
        mine, theirs = run[key], baseline.get(key)
        rows[key] = {"run": mine, "baseline": theirs,
                     "ratio": mine / theirs if mine is not None and theirs else None}
    return {"baseline": baseline["name"], "figures": rows}
