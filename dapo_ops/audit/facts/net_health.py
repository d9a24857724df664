from dapo_ops.ascend.hccn_tool import parse_hccn_net_health
from dapo_ops.audit.fact import Fact

FACT = Fact(
    name="net_health",
    description="hccn_tool -i N -net_health -g: the NPU NIC's network health",
    command=lambda ctx, npu: f"{ctx.install_path}/driver/tools/hccn_tool -i {npu} -net_health -g",
    parse=parse_hccn_net_health,
    per_npu=True,
    absent_codes=(127,),
)
