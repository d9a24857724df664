"""The run lock: a file on every node of a run, created atomically before anything on the nodes changes and removed
by `stop`, a teardown or a failed launch. A second run that shares any node, whatever its head, is refused naming
the holder. `--break-lock` removes a holder's locks only when the holder is provably gone: no Ray process on the
locked nodes, and its launcher dead (same controller: its pid is gone or is another process now) or, launched from
another controller, older than any bring-up can take."""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from dapo_ops.clock import utc_now
from dapo_ops.errors import DapoError
from dapo_ops.fleet.ssh import HostSpec, QUICK, fan_out, run_on
from dapo_ops.job.render import RAY_RUNNING
from dapo_ops.launch.leftovers import leave_command

LOCK_FILE = "/var/lib/dapo-ops/cluster.lock"
_HELD = 3          # the lock script's exit code when another run holds the lock
_RAY_MARK = "@@dapo-ray@@"


class LockError(DapoError):
    """Taking, reading or breaking a lock failed (a node unreachable, a holder not provably gone)."""


@dataclass(frozen=True)
class Lock:
    run_id: str
    controller: str
    pid: int
    created: str
    pid_start: int | None = None             # the launcher's start time (/proc/PID/stat field 22): pids are reused
    nodes: list[str] = field(default_factory=list)
    bring_up_limit: float | None = None      # the launcher's own (model/timeouts.py), judged by other controllers

    def describe(self) -> str:
        return f"run {self.run_id} (launched from {self.controller}, pid {self.pid}, at {self.created})"

    @classmethod
    def parse(cls, text: str) -> "Lock":
        try:
            data = json.loads(text.strip().splitlines()[-1])
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (ValueError, TypeError, IndexError, KeyError):
            return cls("unknown", "unknown", 0, "unknown")


class ClusterLocked(DapoError):
    """Nodes of the run are locked by other runs: node -> holder."""

    def __init__(self, held: dict[str, Lock]):
        self.held = held
        self.holder = next(iter(held.values()))
        where = ", ".join(sorted(held))
        super().__init__(f"{where} {'is' if len(held) == 1 else 'are'} locked by {self.holder.describe()}")


def process_start(pid: int) -> int | None:
    """A process's start time in clock ticks since boot, None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def launcher_state(holder: Lock, here: str | None = None) -> str:
    """"dead", "alive" or "unknown" (launched from another controller, whose processes cannot be seen)."""
    if holder.controller != (here or socket.gethostname()) or not holder.pid:
        return "unknown"
    started = process_start(holder.pid)
    if started is None or (holder.pid_start is not None and started != holder.pid_start):
        return "dead"
    return "alive"


def _age_seconds(created: str, now: float) -> float | None:
    try:
        return now - datetime.fromisoformat(created.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()
    except ValueError:
        return None


def breakable(holder: Lock, ray_on: list[str], launcher: str, bring_up_limit: float,
              now: float | None = None) -> tuple[bool, str]:
    """May `--break-lock` remove this holder's locks? (pure) Returns the answer and the reason to show. A lock that
    records its launcher's bring-up limit is judged by it, else by `bring_up_limit`."""
    bring_up_limit = holder.bring_up_limit or bring_up_limit
    if ray_on:
        return False, (f"Ray is running on {', '.join(sorted(ray_on))}, so {holder.describe()} may be live: "
                       f"`dapo-ops stop {holder.run_id}` stops it")
    if launcher == "dead":
        return True, f"its launcher (pid {holder.pid} on {holder.controller}) is gone and no Ray runs on its nodes"
    if launcher == "alive":
        return False, f"its launcher (pid {holder.pid} on {holder.controller}) is still running"
    age = _age_seconds(holder.created, time.time() if now is None else now)
    if age is not None and age > bring_up_limit:
        return True, (f"no Ray runs on its nodes and it was taken {age / 60:.0f} min ago, longer than any bring-up "
                      f"takes ({bring_up_limit / 60:.0f} min)")
    return False, (f"it was launched from {holder.controller}, which this controller cannot see, and is too recent to "
                   f"be judged gone; stop it from there or retry after {bring_up_limit / 60:.0f} min")


def _lock_script(payload: str) -> str:
    directory = shlex.quote(LOCK_FILE.rsplit("/", 1)[0])
    return (f"mkdir -p {directory} && (set -C; printf '%s\\n' {shlex.quote(payload)} > {LOCK_FILE}) 2>/dev/null || "
            f"{{ cat {LOCK_FILE}; exit {_HELD}; }}")


def owned_by(run_id: str) -> str:
    """Shell: true while the node's lock is `run_id`'s."""
    return _owned_by(run_id)


def _owned_by(run_id: str) -> str:
    return f"grep -qF {shlex.quote(json.dumps({'run_id': run_id})[1:-1])} {LOCK_FILE} 2>/dev/null"


def acquire(hosts: list[HostSpec], run_id: str, bring_up_limit: float | None = None, timeout: float = QUICK) -> None:
    """Lock every node of the run, or none: on any refusal the locks taken are released and ClusterLocked (or,
    for a node that did not answer, LockError) names the node."""
    lock = Lock(run_id, socket.gethostname(), os.getpid(), utc_now(), process_start(os.getpid()),
                [h.name for h in hosts], bring_up_limit)
    script = _lock_script(json.dumps(asdict(lock)))
    results = fan_out(hosts, lambda host: run_on(host, script, timeout=timeout)).results
    held = {name: Lock.parse(r.stdout) for name, r in results.items() if r.failure is None and r.exit_code == _HELD}
    failed = {name: r.error or f"exit {r.exit_code}" for name, r in results.items()
              if r.failure is not None or r.exit_code not in (0, _HELD)}
    failed.update({h.name: "no answer" for h in hosts if h.name not in results})
    if not held and not failed:
        return
    release(hosts, run_id)
    if held:
        raise ClusterLocked(held)
    raise LockError("taking the run lock: " + "; ".join(f"{name}: {why}" for name, why in sorted(failed.items())))


def release(hosts: list[HostSpec], run_id: str, timeout: float = QUICK) -> None:
    """Let go of the nodes once Ray is stopped: the run's secret file and firewall table go
    (leftovers.leave_command), then its lock, from every node where this run holds it (never another run's)."""
    command = f"{leave_command(run_id)}; {_owned_by(run_id)} && rm -f {LOCK_FILE}; true"
    fan_out(hosts, lambda host: run_on(host, command, timeout=timeout), deadline=time.monotonic() + timeout + 5)


def ray_nodes(hosts: list[HostSpec], timeout: float = QUICK) -> list[str]:
    """The nodes where a Ray process runs (a node that does not answer counts: nothing proves it has none)."""
    check = RAY_RUNNING
    results = fan_out(hosts, lambda host: run_on(host, check, timeout=timeout)).results
    return [h.name for h in hosts if h.name not in results or results[h.name].failure is not None
            or results[h.name].exit_code == 0]


def describe_refusal(exc: ClusterLocked, hosts: list[HostSpec], bring_up_limit: float) -> str:
    """The one line for a launch refused by a lock: the holder, and whether --break-lock would remove it."""
    holder = exc.holder
    held = [h for h in hosts if h.name in exc.held]
    gone, why = breakable(holder, ray_nodes(held), launcher_state(holder), bring_up_limit)
    return f"{exc} — {why}; rerun with --break-lock" if gone else f"{exc}; {why}"


def break_stale(hosts: list[HostSpec], bring_up_limit: float, timeout: float = QUICK) -> list[str]:
    """Remove the locks on these nodes whose holders are provably gone; LockError (changing nothing) when a holder
    is not. Returns a line per holder removed."""
    script = (f"cat {LOCK_FILE} 2>/dev/null; echo; echo {_RAY_MARK}; "
              f"if {RAY_RUNNING}; then echo running; fi")
    results = fan_out(hosts, lambda host: run_on(host, script, timeout=timeout)).results
    unanswered = [h.name for h in hosts if h.name not in results or results[h.name].failure is not None]
    if unanswered:
        raise LockError(f"--break-lock: cannot read the locks on {', '.join(unanswered)}")
    holders: dict[str, Lock] = {}
    ray_on = []
    for name, result in results.items():
        lock_text, _, ray = result.stdout.partition(_RAY_MARK)
        if lock_text.strip():
            holders[name] = Lock.parse(lock_text)
        if ray.strip():
            ray_on.append(name)
    verdicts = {}
    for holder in {lock.run_id: lock for lock in holders.values()}.values():
        its_nodes = {name for name, lock in holders.items() if lock.run_id == holder.run_id} | set(holder.nodes)
        ok, why = breakable(holder, [n for n in ray_on if n in its_nodes], launcher_state(holder), bring_up_limit)
        if not ok:
            raise LockError(f"--break-lock refused: {holder.describe()}: {why}")
        verdicts[holder.run_id] = why
    for run_id in verdicts:
        locked = [h for h in hosts if h.name in holders and holders[h.name].run_id == run_id]
        release(locked, run_id)
    return [f"broke the lock of run {run_id}: {why}" for run_id, why in verdicts.items()]
