from dapo_ops.ascend.npu_smi_board import parse_npu_smi_board
from dapo_ops.audit.fact import Fact


def parse(output: str) -> dict:
    board = parse_npu_smi_board(output)
    return {"npu_id": board.npu_id, "software_version": board.software_version,
            "firmware_version": board.firmware_version, "compatibility": board.compatibility,
            "chip_count": board.chip_count}


FACT = Fact(
    name="board",
    description="npu-smi info -t board -i N: driver and firmware versions and their Compatibility, per NPU "
                "(N is an NPU id; an A3 has 8 NPUs for its 16 devices, so board.8 .. board.15 name no NPU)",
    command=lambda ctx, npu: f"npu-smi info -t board -i {npu}",
    parse=parse,
    per_npu=True,
    absent_codes=(127,),
)
