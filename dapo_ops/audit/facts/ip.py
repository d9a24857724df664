from dapo_ops.ascend.hccn_tool import parse_hccn_ip
from dapo_ops.audit.fact import Fact


def parse(output: str) -> dict:
    ip = parse_hccn_ip(output)
    return {"address": ip.address, "netmask": ip.netmask}


FACT = Fact(
    name="ip",
    description="hccn_tool -i N -ip -g: the NPU NIC's device IP ('Get ipconf failed' when none is set)",
    command=lambda ctx, npu: f"{ctx.install_path}/driver/tools/hccn_tool -i {npu} -ip -g",
    parse=parse,
    per_npu=True,
    absent_codes=(127,),
    ok_codes=(0, 1),  # 1 with 'Get ipconf failed ...': no device IP set
)
