from dataclasses import asdict

from dapo_ops.ascend.npu_smi import parse_npu_smi_info
from dapo_ops.audit.fact import Fact


def parse(output: str) -> dict:
    """One entry per chip in "npus" (a 910B NPU has one chip, an Atlas 800T A3 NPU two): npu_id, chip_id, phy_id
    (the table's Phy-ID; null on a 910B) and device_id (the /dev/davinciN index the audit counts: the Phy-ID, or the
    NPU id on a one-chip-per-NPU table), with the chip's health, temperature and HBM."""
    info = parse_npu_smi_info(output)
    return {"driver_version": info.driver_version,
            "npus": [dict(asdict(c), device_id=c.device_id) for c in info.chips],
            "processes": [asdict(p) for p in info.processes]}


FACT = Fact(
    name="npu_smi_info",
    description="npu-smi info: driver in use; per chip (one per 910B NPU, two per A3 NPU) health, temperature, "
                "HBM use; NPU processes",
    command=lambda ctx: "npu-smi info",
    parse=parse,
    absent_codes=(127,),  # no npu-smi: no driver installed
)
