"""A rolling window of fleet samples, each judged with the window (alerts.py), and what `watch` samples of a run's
NPUs on a thread of its own (HardwareWatch)."""

from __future__ import annotations

import threading
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
    """What `watch` adds to a run's checks: its nodes' NPUs sampled over kept-open connections every `period`
    seconds on a thread of its own, judged and appended to the run's hardware record, so the checks (a lost node,
    the job's state, the checkpoints) keep their pace whatever the NPUs' answers cost. check() returns what to say
    since the last call: each alert when it is first raised, or why the sampling stopped; it never raises, so a full
    disk or a node that hangs never ends the watch."""

    def __init__(self, sampler, record: Path | None, period: float = 10.0):
        self.sampler = sampler
        self.record = record
        self.period = period
        self.window = Window()
        self.raised: set[tuple] = set()
        self._said: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> HardwareWatch:
        if self.sampler is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="watch-hardware", daemon=True)
            self._thread.start()
        return self

    def sample_once(self) -> bool:
        """One sample judged and recorded; False (and the reason queued) when sampling has to stop."""
        try:
            from dapo_ops.telemetry import recording

            sample = self.window.add(self.sampler.sample(deadline=time.monotonic() + self.sampler.timeout))
            recording.append(self.record, sample)
        except Exception as exc:   # the watch's own checks go on without the hardware
            self._say([f"the NPUs are no longer sampled: {type(exc).__name__}: {exc}"])
            return False
        new = [a for a in sample.alerts if (a.code, a.node, a.npu) not in self.raised]
        self.raised = {(a.code, a.node, a.npu) for a in sample.alerts}
        self._say([f"{a.message} (check {a.check})" for a in new])
        return True

    def check(self) -> list[str]:
        with self._lock:
            said, self._said = self._said, []
        return said

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)
        if self.sampler is not None:
            self.sampler.close()

    def _say(self, lines: list[str]) -> None:
        with self._lock:
            self._said.extend(lines)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            if not self.sample_once():
                self.sampler.close()
                return
            self._stop.wait(max(0.0, self.period - (time.monotonic() - started)))


def hardware_watch(hosts: list, run_directory: Path, enabled: bool = True, period: float = 10.0) -> HardwareWatch:
    """The run's NPUs sampled every `period` seconds (at least 10) while watch checks the run, recorded in the run
    directory's hardware.jsonl; started."""
    from dapo_ops.telemetry.recording import FILE_NAME
    from dapo_ops.telemetry.sampler import Sampler

    if not enabled:
        return HardwareWatch(None, None)
    sampler = Sampler(hosts, {h.name: h.npus for h in hosts}, freq_every=6)
    return HardwareWatch(sampler, run_directory / FILE_NAME, max(10.0, period)).start()
