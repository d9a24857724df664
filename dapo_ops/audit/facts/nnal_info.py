from dapo_ops.ascend.version_files import parse_nnal_version_info
from dapo_ops.audit.fact import Fact

FACT = Fact(
    name="nnal_info",
    description="NNAL's nnal/atb/latest/version.info",
    command=lambda ctx: f"cat {ctx.install_path}/nnal/atb/latest/version.info",
    parse=parse_nnal_version_info,
    absent_codes=(1,),
)
