"""Taking a run down on its nodes over SSH, the one way every path does it (a failed launch, the rehearsal's end,
a lost node, `dapo-ops stop`): stop Ray, and a start still in flight, then release the run's lock, token and fence
where Ray stopped. Where Ray survived they stay, the node is named, and a later `dapo-ops stop` finishes the job.
cluster.py re-exports ray_stop and the leftovers' commands for its callers."""

from __future__ import annotations

import shlex

from typing import Callable

from dapo_ops.fleet.ssh import COMMAND, HostSpec, fan_out, run_on
from dapo_ops.job.render import RAY_PROCESS_PATTERN, RAY_RUNNING
from dapo_ops.launch import locks
from dapo_ops.launch.leftovers import (DROP_RUN_TABLES, JOB_SECRET_NAMES, PRIVATE_NAMES,  # noqa: F401
                                       forget_job_secrets, leave_command, sweep_dead_runs)
from dapo_ops.model.timeouts import INVENTORY_VAR, step_timeouts

def _unmatchable_by_itself(text: str) -> str:
    """A `pgrep -f` pattern for `text` that does not match the command line carrying it (its first letter in
    brackets), so the shell running the pkill is spared."""
    def ere(part: str) -> str:
        return "".join(f"\\{c}" if c in ".[]()*+?{}|^$\\" else c for c in part)
    index = next(i for i, c in enumerate(text) if c.isalpha())
    return ere(text[:index]) + f"[{text[index]}]" + ere(text[index + 1:])


# After the stops: a Ray of root's that is still there fails the call, naming its processes.
RAY_SURVIVED_EXIT = 3
RAY_SURVIVED = (f"if {RAY_RUNNING}; then pgrep -u 0 -a -f {shlex.quote(RAY_PROCESS_PATTERN)} | cut -c1-120 | "
                f"head -3 >&2; exit {RAY_SURVIVED_EXIT}; fi")


def ray_stop(hosts: list[HostSpec], ray: dict[str, str], timeout: float = COMMAND, only_if_running: bool = False,
             starters_of: str | None = None, first: str | None = None) -> dict[str, str | None]:
    """`ray stop --force` on every node in parallel; returns host -> error (None when stopped). With starters_of (a
    run's node directory), that run's ray-start.sh and the `ray start` it execs are killed first (SIGKILL), so a
    start still in flight (a worker waiting for its head, a head half up) cannot bring a process up after the stop,
    and the stop is repeated while a Ray process is left (up to 3 times, a second apart): under load, a Ctrl-C in
    Ray 2.54's bring-up left a raylet after one stop."""
    def stop(host):
        command = f"{shlex.quote(ray[host.name])} stop --force >/dev/null 2>&1; true"
        if only_if_running:
            command = f"if {RAY_RUNNING}; then {command}; fi"
        if starters_of:
            scripts = shlex.quote(_unmatchable_by_itself(f"{starters_of}/ray-start.sh"))
            starts = shlex.quote(_unmatchable_by_itself(f"{ray[host.name]} start"))
            command = (f"pkill -KILL -f -- {scripts}; pkill -KILL -f -- {starts}; "
                       f"for _ in 1 2 3; do {command}; {RAY_RUNNING} || break; sleep 1; done")
        if first:
            command = f"{first}; {command}"
        result = run_on(host, f"{command}; {RAY_SURVIVED}", timeout=timeout)
        if result.failure is not None:
            return result.error
        if result.exit_code == RAY_SURVIVED_EXIT:
            return f"{host.name}: Ray still runs after `ray stop --force` ({result.stderr.strip()[-300:]})"
        return None
    return fan_out(hosts, stop).results


def stopped(hosts: list[HostSpec], errors: dict) -> list[HostSpec]:
    """The hosts of `hosts` with no error from ray_stop: only there may a run's lock, token and table go (on the
    others Ray still runs, and they stay fenced and locked until a later `dapo-ops stop` gets it down)."""
    return [h for h in hosts if not errors.get(h.name)]


def stop_timeout(hosts: list[HostSpec]) -> int:
    """The inventory's `LAUNCH_TIMEOUTS.stop` (the head's, as the launch read it), else the default."""
    return step_timeouts(hosts[0].vars.get(INVENTORY_VAR) if hosts else None)["stop"]


def tear_down(hosts: list[HostSpec], run_id: str, run_dir: str, timeout: float,
              note: Callable[[str], None] | None = None) -> dict[str, str]:
    """Stop Ray on the run's hosts (its ray-start.sh and `ray start` first), then release the run's lock, token and
    firewall table on those where it stopped; host -> why Ray is still up, for the rest. A stop that is itself
    interrupted (Ctrl-C, a lost controller) releases nothing: no node is known stopped, and `dapo-ops stop` retries."""
    ray = {h.name: h.layout.ray for h in hosts}
    errors = {h: e for h, e in ray_stop(hosts, ray, timeout=timeout, starters_of=run_dir).items() if e}
    for error in errors.values():
        if note:
            note(f"{error}: it stays locked and fenced")
    locks.release(stopped(hosts, errors), run_id)
    return errors


def left_on(errors: dict[str, str], run_id: str) -> str:
    """One message for the nodes a teardown left up."""
    names = ", ".join(sorted(errors))
    return (f"Ray is still up on {names}, which keep the run's lock, token and firewall table: "
            f"{'; '.join(errors[n] for n in sorted(errors))}; `dapo-ops stop {run_id}` retries")
