"""The report's hardware section: the samples `top RUN` and `watch` recorded (the run's hardware.jsonl) set beside
the steps, and the steps slower than the run's median by a margin, each with the alerts raised while it ran.

Each sample is reduced as it is read to what the section draws (per node its hottest NPU and its mean AICore %,
the step it saw, its alerts), so a day's record costs a fraction of its size in memory.

verl's step lines carry no clock time. A sample from `top RUN` carries the last step the run's log showed: a sample
at t that saw step s logged says step s had ended by t. Each step is anchored to the first sample that saw it
ended, and the steps are laid back from each anchor by their `timing_s/step` (a step ends no later than its anchor
nor than the next step's start); the steps after the last anchor follow on by their times. Time between steps
that no step time counts is absorbed at each anchor, so a step is placed off by at most the time between log reads
(`top` reads the log every 30 s). Samples that carry no step (`watch` records none) place nothing: the section then
shows the hardware over time and says that the steps could not be placed."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import median

from dapo_ops.report.steps import STEP_TIME, RunMetrics
from dapo_ops.report.summary import training_steps
from dapo_ops.telemetry.model import FleetSample

SLOW_MARGIN = 0.25   # a step slower than the median by more than this share is slow


@dataclass(frozen=True)
class Point:
    """A sample as the report draws it."""

    at: float
    step: int | None
    hottest: dict[str, float]    # node -> its hottest NPU's temperature
    busy: dict[str, float]       # node -> its NPUs' mean AICore %
    alerts: tuple = ()


def points(samples: Iterable[FleetSample]) -> list[Point]:
    """The samples reduced, in time order."""
    reduced = []
    for sample in samples:
        hottest, busy = {}, {}
        for node in sample.nodes:
            temps = [r.temp_c for r in node.npus if r.temp_c is not None]
            loads = [r.aicore_pct for r in node.npus if r.aicore_pct is not None]
            if temps:
                hottest[node.node] = max(temps)
            if loads:
                busy[node.node] = sum(loads) / len(loads)
        reduced.append(Point(sample.at, sample.run.step if sample.run else None, hottest, busy, sample.alerts))
    return sorted(reduced, key=lambda p: p.at)


@dataclass(frozen=True)
class PlacedStep:
    step: int
    start: float
    end: float
    seconds: float


def _anchors(steps: list[tuple[int, float]], seen: list[Point]) -> list[float | None]:
    """Per step (in order), the time of the first sample that saw it ended, or None."""
    anchors: list[float | None] = [None] * len(steps)
    latest, k = -math.inf, 0
    for point in sorted((p for p in seen if p.step is not None), key=lambda p: p.at):
        latest = max(latest, point.step)
        while k < len(steps) and steps[k][0] <= latest:
            anchors[k] = point.at
            k += 1
    return anchors


def place_steps(steps: list[tuple[int, float]], seen: list[Point]) -> list[PlacedStep]:
    """Each step's start and end in epoch seconds, or [] when no sample saw a step of this run."""
    anchors = _anchors(steps, seen)
    known = [k for k, anchor in enumerate(anchors) if anchor is not None]
    if not known:
        return []
    ends: list[float] = [0.0] * len(steps)
    for k in range(known[-1], -1, -1):       # back from the last anchor
        bound = anchors[k] if anchors[k] is not None else math.inf
        ends[k] = bound if k == known[-1] else min(bound, ends[k + 1] - steps[k + 1][1])
    for k in range(known[-1] + 1, len(steps)):   # on from it
        ends[k] = ends[k - 1] + steps[k][1]
    return [PlacedStep(step, end - seconds, end, seconds) for (step, seconds), end in zip(steps, ends)]


def alerts_during(seen: list[Point], start: float, end: float) -> list:
    """The alerts raised by the samples taken in [start, end], each once (first seen), errors first."""
    first, found = set(), []
    for point in seen:
        if start <= point.at <= end:
            for alert in point.alerts:
                if (alert.code, alert.node, alert.npu) not in first:
                    first.add((alert.code, alert.node, alert.npu))
                    found.append(alert)
    order = {"error": 0, "warning": 1}
    return sorted(found, key=lambda a: order.get(a.severity, 2))


def section(run: RunMetrics, seen: list[Point], unreadable: int = 0, margin: float = SLOW_MARGIN) -> dict:
    """The summary's "hardware" entry: what was sampled, the steps' placement, and the slow steps with their
    alerts. Steps whose time is not a positive number (nan, inf, a negative) are left out."""
    steps = [(step, float(m[STEP_TIME])) for step, m in training_steps(run)
             if isinstance(m[STEP_TIME], (int, float)) and 0 < m[STEP_TIME] < math.inf]
    placed = place_steps(steps, seen)
    typical = median(s for _, s in steps) if steps else None
    slow = [{"step": p.step, "seconds": p.seconds, "ratio": p.seconds / typical, "start": p.start, "end": p.end,
             "alerts": [a.document() for a in alerts_during(seen, p.start, p.end)]}
            for p in placed if typical and p.seconds > typical * (1 + margin)]
    nodes = sorted({n for p in seen for n in (*p.hottest, *p.busy)})
    return {"samples": len(seen), "unreadable_lines": unreadable, "nodes": nodes,
            "first": seen[0].at if seen else None, "last": seen[-1].at if seen else None,
            "steps_placed": bool(placed), "slow_margin": margin, "median_step_s": typical, "slow_steps": slow,
            "alerts": [a.document() for a in alerts_during(seen, -math.inf, math.inf)]}
