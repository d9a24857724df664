from dapo_ops.ascend.hccn_tool import parse_hccn_link
from dapo_ops.audit.fact import Fact

FACT = Fact(
    name="link",
    description="hccn_tool -i N -link -g: the NPU NIC's link status",
    command=lambda ctx, npu: f"{ctx.install_path}/driver/tools/hccn_tool -i {npu} -link -g",
    parse=parse_hccn_link,
    per_npu=True,
    absent_codes=(127,),
)
