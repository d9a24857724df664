"""A rolling window of fleet samples: each new sample joins the window and is judged with it (alerts.py)."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

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


class HardwareWatch:
    """What `watch` adds to each check of a run: a sample of its nodes' NPUs over kept-open connections, judged and
    appended to the run's hardware record. check() returns what to say: each alert when it is first raised, or why
    the sampling stopped; it never raises, so a full disk or a node that hangs never ends the watch. A node slower
    than DEADLINE seconds is left to answer while the watch goes on."""

    DEADLINE = 5.0

    def __init__(self, sampler, record: Path | None):
        self.sampler = sampler
        self.record = record
        self.window = Window()
        self.raised: set[tuple] = set()
        self.stopped = sampler is None

    def check(self) -> list[str]:
        if self.stopped:
            return []
        try:
            from dapo_ops.telemetry import recording

            sample = self.window.add(self.sampler.sample(deadline=time.monotonic() + self.DEADLINE))
            recording.append(self.record, sample)
        except Exception as exc:   # the watch's own checks go on without the hardware
            self.stopped = True
            self.close()
            return [f"the NPUs are no longer sampled: {type(exc).__name__}: {exc}"]
        new = [a for a in sample.alerts if (a.code, a.node, a.npu) not in self.raised]
        self.raised = {(a.code, a.node, a.npu) for a in sample.alerts}
        return [f"{a.message} (check {a.check})" for a in new]

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()


def hardware_watch(hosts: list, run_directory: Path, enabled: bool = True) -> HardwareWatch:
    """The run's NPUs sampled at each of watch's checks, recorded in the run directory's hardware.jsonl."""
    from dapo_ops.telemetry.recording import FILE_NAME
    from dapo_ops.telemetry.sampler import Sampler

    if not enabled:
        return HardwareWatch(None, None)
    return HardwareWatch(Sampler(hosts, {h.name: h.npus for h in hosts}, freq_every=6), run_directory / FILE_NAME)
