"""The CPU time of each integration test, counted in its group's own cgroup: every process the group started, the
simulated nodes' sshd, Ansible's modules, Ray and the job on them included. CI's groups run side by side on a
machine whose cores are busy throughout, so a test's wall time says how long it waited for the machine as much as
what it cost; its CPU time is what a cut saves.

groups.py makes the cgroup (cgroup v1 `cpuacct` or v2), starts the group's pytest in it and opens its usage file as
descriptor DAPO_CI_CPU_FD before the group mounts its own /sys (which hides the host's cgroup tree). The conftest
hooks below add each phase's CPU seconds and print the costliest at the end, beside pytest's --durations. Without a
cgroup (not root, no cpuacct) nothing is counted and nothing is printed.
"""

from __future__ import annotations

import os
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/cpuacct")
V2_ROOT = Path("/sys/fs/cgroup")
FD_VARIABLE = "DAPO_CI_CPU_FD"


def make_cgroup(name: str) -> tuple[Path, Path] | None:
    """(the file a process writes "0" into to join, the usage file) of a new cgroup; None where there is none."""
    candidates = [(V1_ROOT, "cgroup.procs", "cpuacct.usage"), (V2_ROOT, "cgroup.procs", "cpu.stat")]
    for root, procs, usage in candidates:
        if not (root / usage).exists() and not (root / "cgroup.controllers").exists():
            continue
        group = root / f"dapo-ci-{name}"
        try:
            group.mkdir(exist_ok=True)
        except OSError:
            continue
        if (group / usage).exists():
            return group / procs, group / usage
    return None


def remove_cgroup(usage_file: Path) -> None:
    try:
        usage_file.parent.rmdir()
    except OSError:
        pass   # a process still in it (it ends with the group's PID namespace) or already gone


def parse_usage(text: str) -> float:
    """CPU seconds from cpuacct.usage (nanoseconds) or cpu.stat (`usage_usec N`)."""
    for line in text.splitlines():
        if line.startswith("usage_usec "):
            return int(line.split()[1]) / 1e6
    return int(text.split()[0]) / 1e9


def read_seconds(usage_file: Path) -> float:
    return parse_usage(usage_file.read_text())


class Meter:
    """The group's CPU seconds so far, read through the descriptor groups.py opened (None when there is none)."""

    def __init__(self, environ=os.environ):
        fd = environ.get(FD_VARIABLE)
        self.fd = int(fd) if fd and fd.isdigit() else None
        self.costs: list[tuple[float, str, str]] = []

    def seconds(self) -> float | None:
        if self.fd is None:
            return None
        try:
            return parse_usage(os.pread(self.fd, 4096, 0).decode())
        except (OSError, ValueError, IndexError):
            self.fd = None
            return None

    def record(self, before: float | None, phase: str, nodeid: str) -> None:
        after = self.seconds()
        if before is not None and after is not None:
            self.costs.append((after - before, phase, nodeid))

    def summary(self, count: int = 40) -> list[str]:
        if not self.costs:
            return []
        total = sum(cost for cost, _, _ in self.costs)
        lines = [f"{cost:.2f} CPU-s {phase:<8} {nodeid}" for cost, phase, nodeid in
                 sorted(self.costs, reverse=True)[:count]]
        return lines + [f"{total:.0f} CPU-s in the tests' phases"]
