from dataclasses import asdict

from dapo_ops.ascend.parsers import parse_npu_smi_info
from dapo_ops.audit.fact import Fact


def parse(output: str) -> dict:
    info = parse_npu_smi_info(output)
    return {"driver_version": info.driver_version, "npus": [asdict(c) for c in info.chips],
            "processes": [asdict(p) for p in info.processes]}


FACT = Fact(
    name="npu_smi_info",
    description="npu-smi info: driver in use; per NPU health, temperature, HBM use; NPU processes",
    command=lambda ctx: "npu-smi info",
    parse=parse,
    absent_codes=(127,),  # no npu-smi: no driver installed
)
