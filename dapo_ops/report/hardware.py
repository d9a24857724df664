"""The report's hardware section: the samples `top RUN` and `watch` recorded (the run's hardware.jsonl) set beside
the steps, and the steps slower than the run's median by a margin, each with the alerts raised while it ran.

Where each step ran in time is placed from the samples that carry the run's step (`top RUN` reads the log with
each sample): a sample taken at t that saw step s logged says step s had ended by t, so the start of the steps,
T0, is at most t minus the sum of the step times up to s; the tightest such bound places every step, each lasting
its `timing_s/step`. The log is read at most every 30 s, so a step may be placed up to that much late. Samples
that carry no step (`watch` records none) place nothing: the section then shows the hardware over time and says
that the steps could not be placed."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median

from dapo_ops.report.steps import STEP_TIME, RunMetrics
from dapo_ops.report.summary import training_steps
from dapo_ops.telemetry.model import FleetSample

SLOW_MARGIN = 0.25   # a step slower than the median by more than this share is slow


@dataclass(frozen=True)
class PlacedStep:
    step: int
    start: float
    end: float
    seconds: float


def place_steps(steps: list[tuple[int, float]], samples: list[FleetSample]) -> list[PlacedStep]:
    """Each step's start and end in epoch seconds, or [] when no sample saw a step of this run."""
    ends, total = {}, 0.0
    for step, seconds in steps:
        total += seconds
        ends[step] = total
    bounds = [s.at - ends[s.run.step] for s in samples if s.run is not None and s.run.step in ends]
    if not bounds:
        return []
    start = min(bounds)
    placed, clock = [], start
    for step, seconds in steps:
        placed.append(PlacedStep(step, clock, clock + seconds, seconds))
        clock += seconds
    return placed


def alerts_during(samples: list[FleetSample], start: float, end: float) -> list:
    """The alerts raised by the samples taken in [start, end], each once (first seen), errors first."""
    seen, found = set(), []
    for sample in samples:
        if start <= sample.at <= end:
            for alert in sample.alerts:
                if (alert.code, alert.node, alert.npu) not in seen:
                    seen.add((alert.code, alert.node, alert.npu))
                    found.append(alert)
    order = {"error": 0, "warning": 1}
    return sorted(found, key=lambda a: order.get(a.severity, 2))


def section(run: RunMetrics, samples: list[FleetSample], unreadable: int = 0, margin: float = SLOW_MARGIN) -> dict:
    """The summary's "hardware" entry: what was sampled, the steps' placement, and the slow steps with their
    alerts."""
    steps = [(step, float(m[STEP_TIME])) for step, m in training_steps(run)]
    placed = place_steps(steps, samples)
    typical = median(s for _, s in steps) if steps else None
    slow = []
    for p in placed:
        if typical and p.seconds > typical * (1 + margin):
            slow.append({"step": p.step, "seconds": p.seconds, "ratio": p.seconds / typical,
                         "start": p.start, "end": p.end,
                         "alerts": [a.document() for a in alerts_during(samples, p.start, p.end)]})
    nodes = sorted({n.node for s in samples for n in s.nodes})
    return {"samples": len(samples), "unreadable_lines": unreadable, "nodes": nodes,
            "first": samples[0].at if samples else None, "last": samples[-1].at if samples else None,
            "steps_placed": bool(placed), "slow_margin": margin, "median_step_s": typical, "slow_steps": slow,
            "alerts": [a.document() for a in alerts_during(samples, float("-inf"), float("inf"))]}


def node_series(samples: list[FleetSample], value, reduce=max) -> dict[str, tuple[list[float], list[float]]]:
    """Per node, (times, reduce over its NPUs of value(reading)) for the samples where it had readings."""
    series: dict[str, tuple[list[float], list[float]]] = {}
    for sample in samples:
        for node in sample.nodes:
            values = [v for r in node.npus if (v := value(r)) is not None]
            if values:
                times, means = series.setdefault(node.node, ([], []))
                times.append(sample.at)
                means.append(reduce(values))
    return series
