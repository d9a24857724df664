"""What a run leaves on its nodes that must not outlive it (its secrets, Ray token, TLS files, firewall table),
and the shell that removes it: after a stop (leave_command), at the next launch (sweep_dead_runs, DROP_RUN_TABLES),
when its job ends (forget_job_secrets)."""

from __future__ import annotations

import shlex

from dapo_ops.fleet.ssh import HostSpec, QUICK, fan_out, run_on
from dapo_ops.job.ray_tls import CA_NAME, CERT_NAME, KEY_NAME
from dapo_ops.job.render import RAY_TOKEN_NAME, RUNS_ROOT, firewall_table, node_dir
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


def forget_job_secrets(hosts: list[HostSpec], run_id: str, timeout: float = QUICK) -> dict[str, str | None]:
    """A run whose job has ended: its secret files (the job's API keys) removed from every node; host -> error. The
    Ray token stays while Ray does (`dapo-ops logs` and `stop` use it)."""
    files = " ".join(shlex.quote(f"{node_dir(run_id)}/{name}") for name in JOB_SECRET_NAMES)

    def forget(host: HostSpec) -> str | None:
        result = run_on(host, f"rm -f -- {files}", timeout=timeout)
        return result.error if result.failure is not None else None
    return fan_out(hosts, forget).results


# Every run table on the node (`dapo_ops_*`), deleted: on nodes this launch has locked, any is a dead run's, and
# its peer set could keep this run's nodes out.
DROP_RUN_TABLES = ("if command -v nft >/dev/null; then nft list tables inet 2>/dev/null | "
                   "awk '$3 ~ /^dapo_ops_/ {print $3}' | while read -r t; do nft delete table inet \"$t\"; done; fi")
