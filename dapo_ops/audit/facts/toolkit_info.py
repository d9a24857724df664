from dapo_ops.ascend.version_files import parse_toolkit_install_info
from dapo_ops.audit.fact import Fact

FACT = Fact(
    name="toolkit_info",
    description="the CANN toolkit's ascend_toolkit_install.info",
    command=lambda ctx: f"cat {ctx.install_path}/ascend-toolkit/latest/*-linux/ascend_toolkit_install.info",
    parse=parse_toolkit_install_info,
    absent_codes=(1,),
)
