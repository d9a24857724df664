"""Whether a directory is one filesystem every node sees (NFS, a parallel filesystem) or each node's own: a marker
file written on the first node is looked for on the others, then removed. Checkpoints (docs/checkpoints.md) and the
staging of a job's files ask this the same way."""

from __future__ import annotations

import shlex
from secrets import token_hex

from dapo_ops.fleet.ssh import QUICK, HostSpec, fan_out, run_on

SEEN = "dapo-ops-marker-seen"


def is_shared(hosts: list[HostSpec], directory: str, timeout: float = QUICK) -> bool:
    """True when a file created in `directory` on the first host is there on every other host at once. False for
    one host, when the directory cannot be written there, or when any other host does not see it (or answer)."""
    if len(hosts) < 2:
        return False
    marker = shlex.quote(f"{directory}/.dapo-ops-shared-{token_hex(8)}")
    first, others = hosts[0], hosts[1:]
    made = run_on(first, f"umask 077 && : > {marker}", timeout=timeout)
    if made.failure is not None or made.exit_code != 0:
        return False
    try:
        seen = fan_out(others, lambda host: run_on(host, f"test -e {marker} && echo {SEEN}", timeout=timeout)).results
        return all(host.name in seen and seen[host.name].failure is None and SEEN in seen[host.name].stdout
                   for host in others)
    finally:
        run_on(first, f"rm -f {marker}", timeout=timeout)
