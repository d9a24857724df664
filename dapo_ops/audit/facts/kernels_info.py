from dapo_ops.ascend.version_files import parse_version_info
from dapo_ops.audit.fact import Fact

FACT = Fact(
    name="kernels_info",
    description="the CANN kernels package's opp_kernel/version.info",
    command=lambda ctx: f"cat {ctx.install_path}/ascend-toolkit/latest/opp_kernel/version.info",
    parse=lambda output: parse_version_info(output, "cat opp_kernel/version.info", ("version_dir",)),
    absent_codes=(1,),
)
