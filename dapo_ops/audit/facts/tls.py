"""hccn_tool -i N -tls -g: the NPU NIC's TLS switch. HCCL's links between two NPUs whose switches differ do not come
up: the set-up waits until HCCL_CONNECT_TIMEOUT (+20 s) and names no cause, and HDK checks the switches' consistency
up front only from 25.2 on; the audit compares them across the fleet (dapo_ops/audit/npus.py tls_findings)."""

from dapo_ops.ascend.hccn_tool import parse_hccn_tls
from dapo_ops.audit.fact import Fact


def parse(output: str) -> dict:
    return {"enabled": parse_hccn_tls(output)}


FACT = Fact(
    name="tls",
    description="hccn_tool -i N -tls -g: the NPU NIC's TLS switch, which every NPU of a run must share",
    command=lambda ctx, npu: f"{ctx.install_path}/driver/tools/hccn_tool -i {npu} -tls -g",
    parse=parse,
    per_npu=True,
    absent_codes=(127,),
)
