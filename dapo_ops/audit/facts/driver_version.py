from dapo_ops.ascend.version_files import parse_version_info
from dapo_ops.audit.fact import Fact

FACT = Fact(
    name="driver_version",
    description="the installed driver's version.info",
    command=lambda ctx: f"cat {ctx.install_path}/driver/version.info",
    parse=lambda output: parse_version_info(output, "cat driver/version.info"),
    absent_codes=(1,),  # cat: no such file: not installed
)
