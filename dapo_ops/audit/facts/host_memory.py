"""The node's memory as the kernel reports it (/proc/meminfo MemTotal, in KiB: what `free` and Ansible's
ansible_memtotal_mb read): launch and preflight compare it with the job's host-memory estimate
(dapo_ops/job/memory.py)."""

import re

from dapo_ops.audit.fact import Fact
from dapo_ops.errors import ParseError

COMMAND = "cat /proc/meminfo"
_MEM_TOTAL = re.compile(r"^MemTotal:\s+(\d{1,15})\s+kB\s*$", re.MULTILINE)


def parse(output: str) -> dict:
    found = _MEM_TOTAL.findall(output)
    if len(found) != 1:
        raise ParseError("/proc/meminfo", "no MemTotal line in kB" if not found else "MemTotal twice")
    kib = int(found[0])
    return {"mem_total_kib": kib, "mem_total_gib": round(kib / 2**20, 3)}


FACT = Fact(
    name="host_memory",
    description="/proc/meminfo MemTotal: the host memory the job's offloaded states and vLLM's sleeping weights use",
    command=lambda ctx: COMMAND,
    parse=parse,
)
