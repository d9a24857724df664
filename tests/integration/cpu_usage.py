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
    """(the file a process writes "0" into to join, the usage file) of a new cgroup, named after the group and this
    process (a cgroup keeps the usage of every process that ever ran in it); None where there is none. Empty ones
    an earlier run left (it was killed before it removed them) go first."""
    candidates = [(V1_ROOT, "cgroup.procs", "cpuacct.usage"), (V2_ROOT, "cgroup.procs", "cpu.stat")]
    for root, procs, usage in candidates:
        if not (root / usage).exists() and not (root / "cgroup.controllers").exists():
            continue
        for stale in root.glob(f"dapo-ci-{name}-*"):
            remove_cgroup(stale / usage)
        group = root / f"dapo-ci-{name}-{os.getpid()}"
        try:
            group.mkdir()
        except OSError:
            continue
        if (group / usage).exists():
            return group / procs, group / usage
        remove_cgroup(group / usage)
    return None


def join_cgroup(procs_file: str) -> None:
    """In a child before it execs: into the cgroup, with whatever it starts. Where the kernel refuses, the child
    runs outside it and the group's counts stay at zero, which nothing prints."""
    try:
        with open(procs_file, "w") as procs:
            procs.write("0")
    except OSError:
        pass


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


def read_seconds(usage_file: Path) -> float | None:
    try:
        return parse_usage(usage_file.read_text()) or None
    except (OSError, ValueError, IndexError):
        return None


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
        total = sum(cost for cost, _, _ in self.costs)
        if not total:
            return []
        lines = [f"{cost:.2f} CPU-s {phase:<8} {nodeid}" for cost, phase, nodeid in
                 sorted(self.costs, reverse=True)[:count]]
        return lines + [f"{total:.0f} CPU-s in the tests' phases"]
