"""Host processes for the simulator: run a command, and look at, wait for or stop a process by its PID."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from dapo_sim.errors import SimError


def run(cmd: list[str], what: str, check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """Run a host command; `what` names the step in the SimError raised when it is missing, hangs or fails."""
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except FileNotFoundError:
        raise SimError(f"{what}: {cmd[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise SimError(f"{what}: `{' '.join(cmd)}` did not finish in {timeout:.0f} s") from None
    if check and result.returncode != 0:
        raise failure(what, result)
    return result


def failure(what: str, result: subprocess.CompletedProcess) -> SimError:
    """The one-line error for a failed host command: the step, then the command's last line of output."""
    detail = (result.stderr or result.stdout).strip().splitlines()
    return SimError(f"{what}: {detail[-1] if detail else 'exit code %d' % result.returncode}")


def alive(pid: int | None) -> bool:
    """The process exists and is not a zombie."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def start_time(pid: int | None) -> int | None:
    """When the process started, in clock ticks since boot (field 22 of /proc/PID/stat); None when it is gone.
    With the PID, it names one process: a recycled PID has a later start time."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text() if pid else ""
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()  # the command name before ")" may hold spaces
    return int(fields[19]) if len(fields) > 19 else None


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def boot_time() -> float:
    """When this machine booted, in seconds since the epoch (/proc/stat btime)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise SimError("/proc/stat has no btime")


def kill_if_ours(pid: int | None, start: int | None, sig: int, marker: str = "") -> bool:
    """Signal the process only while it is the one recorded: it has the recorded start time or, for a record
    without one, its command line still holds `marker`. A recycled PID is left alone."""
    if not alive(pid):
        return False
    ours = start_time(pid) == start if start is not None else bool(marker) and marker in cmdline(pid)
    if not ours:
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pids: list[int], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.02)


def port_open(ip: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False
