from dapo_ops.ascend.parsers import parse_npu_smi_board
from dapo_ops.audit.fact import Fact


def parse(output: str) -> dict:
    board = parse_npu_smi_board(output)
    return {"npu_id": board.npu_id, "software_version": board.software_version,
            "firmware_version": board.firmware_version, "compatibility": board.compatibility}


FACT = Fact(
    name="board",
    description="npu-smi info -t board -i N: driver and firmware versions and their Compatibility, per NPU",
    command=lambda ctx, npu: f"npu-smi info -t board -i {npu}",
    parse=parse,
    per_npu=True,
    absent_codes=(127,),
)
