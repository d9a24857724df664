"""A rolling window of fleet samples: each new sample joins the window and is judged with it (alerts.py)."""

from __future__ import annotations

import time
from collections import deque

from dapo_ops.telemetry.alerts import Thresholds, alerts
from dapo_ops.telemetry.model import FleetSample, NodeSample, RunProgress


class Window:
    def __init__(self, seconds: float = 60.0, thresholds: Thresholds = Thresholds()):
        self.seconds = seconds
        self.thresholds = thresholds
        self.samples: deque[FleetSample] = deque()

    def add(self, nodes: tuple[NodeSample, ...], run: RunProgress | None = None,
            at: float | None = None) -> FleetSample:
        """The sample with its alerts, judged over the samples of the last `seconds` (itself included)."""
        at = time.time() if at is None else at
        while self.samples and at - self.samples[0].at > self.seconds:
            self.samples.popleft()
        bare = FleetSample(at, nodes, run)
        judged = FleetSample(at, nodes, run, tuple(alerts([*self.samples, bare], self.thresholds)))
        self.samples.append(judged)
        return judged
