"""Is a node busy with a run? What site.yml's preflight reads before it installs or reboots anything (pure): the
node's run lock (launch/locks.py) and the processes `npu-smi info` lists on its NPUs.

A node that holds a run's lock or has processes on its NPUs is refused, unless the inventory names that run in
PROVISION_DURING_RUN (or "any", for processes no dapo-ops run owns)."""

from __future__ import annotations

from dapo_ops.ascend.npu_smi import parse_npu_smi_info
from dapo_ops.errors import ParseError
from dapo_ops.launch.locks import LOCK_FILE, Lock
from dapo_ops.model.variables import PROVISION_DURING_RUN

ANY = "any"
SHOWN = 4   # processes named in the message; the rest are counted


def _override(run: str) -> str:
    return f"or set {PROVISION_DURING_RUN}: {run} for this node to provision it anyway"


def busy_node_problems(lock: tuple[int, str], npu_smi: tuple[int, str], allowed: str | None) -> list[str]:
    """lock: (exit code, output) of `cat LOCK_FILE`; npu_smi: of `npu-smi info` (127: not installed yet);
    allowed: the inventory's PROVISION_DURING_RUN. Returns why provisioning this node would hit a live run."""
    problems = []
    holder = Lock.parse(lock[1]) if lock[0] == 0 and lock[1].strip() else None
    if holder is not None and allowed not in (holder.run_id, ANY):
        problems.append(f"it holds the run lock of {holder.describe()} ({LOCK_FILE}): installing or rebooting would "
                        f"break that run; `dapo-ops stop {holder.run_id}` ends it and frees the node, "
                        + _override(holder.run_id))
    if npu_smi[0] != 0 or (holder is not None and allowed == holder.run_id) or allowed == ANY:
        return problems
    try:
        processes = parse_npu_smi_info(npu_smi[1]).processes
    except ParseError as exc:
        return problems + [f"cannot tell whether its NPUs are in use: {exc}"]
    if processes:
        named = ", ".join(f"pid {p.pid}{' ' + p.name if p.name else ''} on NPU {p.npu_id}" for p in processes[:SHOWN])
        more = f" and {len(processes) - SHOWN} more" if len(processes) > SHOWN else ""
        run = holder.run_id if holder is not None else ANY
        problems.append(f"{len(processes)} process(es) run on its NPUs ({named}{more}): stop them first, "
                        + _override(run))
    return problems
