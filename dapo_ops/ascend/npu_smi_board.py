"""Parser of ``npu-smi info -t board -i N [-c CHIP]``: an NPU's driver, firmware and their Compatibility."""

from __future__ import annotations

from dataclasses import dataclass

from dapo_ops.ascend.where import Where


def _key_value_lines(text: str, where: Where) -> list[tuple[str, str]]:
    """``\\t%-30s : %s`` lines (blank lines between the NPU's block and its chips' blocks are skipped)."""
    pairs: list[tuple[str, str]] = []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if " : " not in line and not line.rstrip().endswith(" :"):
            where.at(line_no, line).fail("expected 'key : value'")
        key, _, value = line.partition(" :")
        pairs.append((key.strip(), value.strip()))
    if not pairs:
        where.fail("no 'key : value' lines (empty output)")
    return pairs


@dataclass(frozen=True)
class BoardInfo:
    """``npu-smi info -t board -i N`` (the NPU's board) or ``... -i N -c CHIP`` (one chip of it).

    The NPU form carries the driver (``Software Version``), the firmware and their ``Compatibility`` and ends with
    ``Chip Count`` (1 on a 910B, 2 on an Atlas 800T A3). The chip form carries ``Chip ID``, ``Chip Name`` and the
    chip's ``Firmware Version`` instead (no Software Version, no Compatibility). Every line is npu-smi's
    ``\\t%-30s : %s``: a tab, the key padded to 30 characters, `` : `` and the value; a blank line separates the NPU's
    block from a chip's.
    """

    npu_id: int
    software_version: str | None
    firmware_version: str | None
    compatibility: str | None
    fields: dict[str, str]
    chip_count: int | None = None
    chip_id: int | None = None
    chip_name: str | None = None


def parse_npu_smi_board(text: str, command: str = "npu-smi info -t board -i N") -> BoardInfo:
    where = Where(command)
    pairs: dict[str, str] = {}
    for key, value in _key_value_lines(text, where):
        pairs.setdefault(key, value)  # the NPU's own block comes first; a later block (a chip's) does not override it
    if "NPU ID" not in pairs:
        where.fail("missing 'NPU ID'")
    chip_count = where.integer(pairs["Chip Count"], "Chip Count") if "Chip Count" in pairs else None
    if chip_count is not None and chip_count < 1:
        where.fail(f"Chip Count is {chip_count}: an NPU has at least one chip")
    return BoardInfo(
        npu_id=where.integer(pairs["NPU ID"], "NPU ID"),
        software_version=pairs.get("Software Version"),
        firmware_version=pairs.get("Firmware Version"),
        compatibility=pairs.get("Compatibility"),
        fields=pairs,
        chip_count=chip_count,
        chip_id=where.integer(pairs["Chip ID"], "Chip ID") if "Chip ID" in pairs else None,
        chip_name=pairs.get("Chip Name"),
    )
