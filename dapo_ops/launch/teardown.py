"""Taking Ray down on a run's nodes over SSH, and what a run leaves behind once Ray is down (cluster.py re-exports
these for its callers)."""

from __future__ import annotations

import shlex

from dapo_ops.fleet.ssh import HostSpec, fan_out, run_on
from dapo_ops.job.ray_tls import CA_NAME, CERT_NAME, KEY_NAME
from dapo_ops.job.render import RAY_PROCESS_PATTERN, RAY_RUNNING, RAY_TOKEN_NAME, RUNS_ROOT, firewall_table, node_dir
from dapo_ops.job.secrets import SECRET_FILES

# A run's private files on a node (the job's secrets, the Ray token, the TLS key and certificates; secrets.env: runs
# launched before the secret files), which nothing may keep once the run is over.
JOB_SECRET_NAMES = (*SECRET_FILES, "secrets.env")
PRIVATE_NAMES = (*JOB_SECRET_NAMES, RAY_TOKEN_NAME, CA_NAME, CERT_NAME, KEY_NAME)


def leave_command(run_id: str) -> str:
    """What a run leaves on a node that must not outlive it, removed: its Ray token, its TLS key and certificates,
    its netrc file (and the secrets.env of runs launched before it) and its firewall table. Run once Ray is
    stopped; never fails."""
    files = " ".join(shlex.quote(f"{node_dir(run_id)}/{name}") for name in PRIVATE_NAMES)
    table = shlex.quote(firewall_table(run_id))
    return (f"rm -f -- {files}; if command -v nft >/dev/null; then nft delete table inet {table} 2>/dev/null; fi; "
            "true")


def sweep_dead_runs(run_id: str) -> str:
    """Shell: the private files of every run directory on the node but `run_id`'s, removed. Run on the nodes this
    launch has locked, where any other run is a dead one (a crash, a reboot, a stop that never came)."""
    names = " ".join(shlex.quote(n) for n in PRIVATE_NAMES)
    own = shlex.quote(f"{RUNS_ROOT}/{run_id}")
    # a symbolic link among them is skipped: it could lead to this run's own directory or out of RUNS_ROOT
    return (f"for d in {shlex.quote(RUNS_ROOT)}/*/; do [ -d \"$d\" ] && [ ! -L \"${{d%/}}\" ] && "
            f"[ \"${{d%/}}\" != {own} ] || continue; "
            f"for n in {names}; do rm -f -- \"$d$n\"; done; done")


def forget_job_secrets(hosts: list[HostSpec], run_id: str, timeout: float = 30) -> dict[str, str | None]:
    """A run whose job has ended: its secret files (the job's API keys) removed from every node; host -> error. The
    Ray token stays while Ray does (`dapo-ops logs` and `stop` use it)."""
    files = " ".join(shlex.quote(f"{node_dir(run_id)}/{name}") for name in JOB_SECRET_NAMES)

    def forget(host: HostSpec) -> str | None:
        result = run_on(host, f"rm -f -- {files}", timeout=timeout)
        return result.error if result.failure is not None else None
    return fan_out(hosts, forget).results


def _unmatchable_by_itself(text: str) -> str:
    """A `pgrep -f` pattern for `text` that does not match the command line carrying it (its first letter in
    brackets), so the shell running the pkill is spared."""
    def ere(part: str) -> str:
        return "".join(f"\\{c}" if c in ".[]()*+?{}|^$\\" else c for c in part)
    index = next(i for i, c in enumerate(text) if c.isalpha())
    return ere(text[:index]) + f"[{text[index]}]" + ere(text[index + 1:])


# Every run table on the node (`dapo_ops_*`), deleted: on nodes this launch has locked, any is a dead run's, and
# its peer set could keep this run's nodes out.
DROP_RUN_TABLES = ("if command -v nft >/dev/null; then nft list tables inet 2>/dev/null | "
                   "awk '$3 ~ /^dapo_ops_/ {print $3}' | while read -r t; do nft delete table inet \"$t\"; done; fi")


# After the stops: a Ray of root's that is still there fails the call, naming its processes.
RAY_SURVIVED_EXIT = 3
RAY_SURVIVED = (f"if {RAY_RUNNING}; then pgrep -u 0 -a -f {shlex.quote(RAY_PROCESS_PATTERN)} | cut -c1-120 | "
                f"head -3 >&2; exit {RAY_SURVIVED_EXIT}; fi")


def ray_stop(hosts: list[HostSpec], ray: dict[str, str], timeout: float = 60, only_if_running: bool = False,
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
