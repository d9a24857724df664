from dapo_ops.ascend.version_files import parse_version_info
from dapo_ops.audit.fact import Fact

FACT = Fact(
    name="firmware_version",
    description="the installed firmware's version.info",
    command=lambda ctx: f"cat {ctx.install_path}/firmware/version.info",
    parse=lambda output: parse_version_info(output, "cat firmware/version.info"),
    absent_codes=(1,),
)
