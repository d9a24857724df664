"""Parsers of npu-smi output: the ``npu-smi info`` table and ``npu-smi info -t board``.

Each takes the raw text (and the command it came from, for the error) and returns a typed, frozen result;
malformed or truncated output raises ``ParseError`` naming the command and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dapo_ops.ascend.where import Where

# ------------------------------------------------------------------------------------------------ npu-smi info


@dataclass(frozen=True)
class NpuChip:
    """One chip row-pair of the ``npu-smi info`` table.

    A 910B (Atlas 800T A2) NPU has one chip (chip 0) and the table prints no Phy-ID: ``phy_id`` is None. An Atlas
    800T A3 NPU (``Ascend910``) has two chips, 0 and 1, each with its own health, temperature and HBM and its own
    ``Phy-ID``; the second chip's power is ``-`` (None here).
    """

    npu_id: int
    chip_id: int
    name: str
    health: str
    power_w: float | None
    temp_c: int | None
    hugepages_used: int
    hugepages_total: int
    bus_id: str
    aicore_pct: int | None
    memory_used_mb: int
    memory_total_mb: int
    hbm_used_mb: int
    hbm_total_mb: int
    phy_id: int | None = None

    @property
    def device_id(self) -> int:
        """The device index: what /dev/davinciN, hccn_tool -i N and Ray count (one per chip).

        The Phy-ID where the table prints one (A3); on a one-chip-per-NPU table (910B) the NPU id.
        """
        return self.npu_id if self.phy_id is None else self.phy_id


@dataclass(frozen=True)
class NpuProcess:
    npu_id: int
    chip_id: int
    pid: int
    name: str
    memory_mb: int


@dataclass(frozen=True)
class NpuSmiInfo:
    npu_smi_version: str
    driver_version: str
    chips: tuple[NpuChip, ...]
    processes: tuple[NpuProcess, ...] = field(default_factory=tuple)

    @property
    def npu_ids(self) -> list[int]:
        return sorted({c.npu_id for c in self.chips})

    @property
    def device_ids(self) -> list[int]:
        """One per chip (see NpuChip.device_id); equal to npu_ids on a 910B."""
        return sorted(c.device_id for c in self.chips)

    @property
    def multi_chip(self) -> bool:
        """An A3-style table: chips carry a Phy-ID, or some NPU has more than one chip."""
        return any(c.phy_id is not None for c in self.chips) or len(self.npu_ids) < len(self.chips)

    def chips_of(self, npu_id: int) -> tuple[NpuChip, ...]:
        return tuple(sorted((c for c in self.chips if c.npu_id == npu_id), key=lambda c: c.chip_id))


_HEADER = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_PAIR = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_CHIP_ID_COLUMNS = ("Phy-ID", "PhyID", "Phy ID", "Device")  # the second id column of a chip row, when printed


def _cells(line: str) -> list[str]:
    """Cells between the outer bars, e.g. '| a | b |' -> ['a', 'b']."""
    parts = line.split("|")
    return [p.strip() for p in parts[1:-1]]


def _int(value: str, where: Where, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        where.fail(f"{what} is not an integer ({value!r})")


def _optional_number(value: str, kind: type, where: Where, what: str):
    if value in ("-", "NA", ""):
        return None
    try:
        return kind(value)
    except ValueError:
        where.fail(f"{what} is not a number ({value!r})")


def _split_metrics(cell: str, count: int, where: Where) -> list[str]:
    """Split a metrics cell like '102.8  55  0    / 0' into fields, keeping 'a / b' pairs together."""
    normalized = re.sub(r"\s*/\s*", "/", cell.strip())
    fields = normalized.split()
    if len(fields) != count:
        where.fail(f"expected {count} fields in the metrics cell, got {len(fields)}")
    return fields


def _pair(value: str, where: Where, what: str) -> tuple[int, int]:
    match = _PAIR.match(value.replace("/", " / "))
    if not match:
        where.fail(f"{what} is not 'used / total' ({value!r})")
    return int(match.group(1)), int(match.group(2))


def _chip_header_ids(cell: str, where: Where) -> int:
    """'Chip' -> 1 id per chip row (910B); 'Chip  Phy-ID' / 'Chip Phy-ID' -> 2 (A3: chip id and Phy-ID)."""
    rest = " ".join(cell.split()[1:])
    if not rest:
        return 1
    if rest in _CHIP_ID_COLUMNS:
        return 2
    where.fail(f"unknown chip header column {rest!r} (expected 'Chip' or 'Chip  Phy-ID')")


def parse_npu_smi_info(text: str, command: str = "npu-smi info") -> NpuSmiInfo:
    """The ``npu-smi info`` table, split on '|' (cell widths differ between npu-smi releases).

    One row-pair per chip: the NPU row (``NPU-ID Name | Health | Power Temp Hugepages``) then the chip row
    (``Chip [Phy-ID] | Bus-Id | AICore Memory HBM``). A 910B has one pair per NPU and a ``Chip`` header; an Atlas
    800T A3 has two pairs per NPU (chip 0 and chip 1, each repeating the NPU id and name, split by a ``+---+`` line)
    and a ``Chip  Phy-ID`` header, its chip rows carrying the chip id and the Phy-ID. The process table that
    follows names ``NPU Chip`` per row; later npu-smi releases add a trailing ``Process id in container`` column
    (read and ignored). ../shared/reference/ascend.md §3.1.
    """
    version = driver = None
    chips: list[NpuChip] = []
    processes: list[NpuProcess] = []
    section = None  # "devices" | "processes"
    device_cells = 3
    chip_ids: int | None = None  # ids per chip row from the header: 1 (Chip) or 2 (Chip Phy-ID); None: not seen
    process_cells = 4
    pending: tuple[int, str, str, list[str], Where] | None = None  # the NPU row awaiting its chip row
    seen: set[tuple[int, int]] = set()
    phys: set[int] = set()

    lines = text.splitlines()
    for line_no, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("+"):
            continue
        where = Where(command, line_no, line)
        if not (stripped.startswith("|") and stripped.endswith("|")):
            where.fail("line is not a table row")
        cells = _cells(stripped)
        joined = " ".join(cells)
        header = _HEADER.search(joined)
        if header and version is None:
            version, driver = header.group(1), header.group(2)
            continue
        if cells and cells[0].startswith("NPU") and "Name" in cells[0]:
            if section is not None:
                where.fail("a second device table header")
            section = "devices"
            device_cells = len(cells)
            if device_cells < 3:
                where.fail(f"expected at least 3 cells in the device header, got {device_cells}")
            continue
        if cells and cells[0].startswith("Chip") and len(cells) >= 2 and cells[1].startswith("Bus-Id"):
            if section != "devices" or chip_ids is not None:
                where.fail("chip header outside the device table header")
            chip_ids = _chip_header_ids(cells[0], where)
            continue
        if cells and cells[0].startswith("NPU") and "Chip" in cells[0]:
            if pending is not None:
                pending[4].fail("NPU row without its chip row")
            section = "processes"
            process_cells = len(cells)
            if process_cells < 4:
                where.fail(f"expected at least 4 cells in the process header, got {process_cells}")
            continue
        if section == "devices":
            if len(cells) != device_cells:
                where.fail(f"expected {device_cells} cells, got {len(cells)}")
            first = cells[0].split()
            if pending is None:
                if len(first) < 2:
                    where.fail("expected 'NPU-ID Name'")
                npu_id = _int(first[0], where, "NPU id")
                metrics = _split_metrics(cells[2], 3, where)
                pending = (npu_id, " ".join(first[1:]), cells[1], metrics, where)
                continue
            expected_ids = chip_ids or len(first)
            if len(first) != expected_ids or expected_ids not in (1, 2):
                want = "'Chip Phy-ID'" if chip_ids == 2 else "'Chip'" if chip_ids == 1 else "'Chip [Phy-ID]'"
                where.fail(f"expected the chip row ({want}) after an NPU row")
            npu_id, name, health, first_metrics, _ = pending
            chip_id = _int(first[0], where, "chip id")
            phy_id = _int(first[1], where, "Phy-ID") if len(first) == 2 else None
            if (npu_id, chip_id) in seen:
                where.fail(f"NPU {npu_id} chip {chip_id} is listed twice")
            if phy_id is not None and phy_id in phys:
                where.fail(f"Phy-ID {phy_id} is listed twice")
            seen.add((npu_id, chip_id))
            if phy_id is not None:
                phys.add(phy_id)
            second = _split_metrics(cells[2], 3, where)
            hp_used, hp_total = _pair(first_metrics[2], where, "Hugepages-Usage")
            mem_used, mem_total = _pair(second[1], where, "Memory-Usage")
            hbm_used, hbm_total = _pair(second[2], where, "HBM-Usage")
            chips.append(NpuChip(
                npu_id=npu_id, chip_id=chip_id, name=name, health=health,
                power_w=_optional_number(first_metrics[0], float, where, "Power(W)"),
                temp_c=_optional_number(first_metrics[1], int, where, "Temp(C)"),
                hugepages_used=hp_used, hugepages_total=hp_total, bus_id=cells[1],
                aicore_pct=_optional_number(second[0], int, where, "AICore(%)"),
                memory_used_mb=mem_used, memory_total_mb=mem_total, hbm_used_mb=hbm_used, hbm_total_mb=hbm_total,
                phy_id=phy_id,
            ))
            pending = None
            continue
        if section == "processes":
            if len(cells) == 1 and cells[0].startswith("No running processes found"):
                continue
            if len(cells) != process_cells:
                where.fail(f"expected {process_cells} cells in a process row, got {len(cells)}")
            ids = cells[0].split()
            if len(ids) != 2:
                where.fail("expected 'NPU Chip' in a process row")
            processes.append(NpuProcess(
                npu_id=_int(ids[0], where, "NPU id"),
                chip_id=_int(ids[1], where, "chip id"),
                pid=_int(cells[1], where, "process id"),
                name=cells[2],
                memory_mb=_int(cells[3], where, "process memory"),
            ))
            continue
        where.fail("row outside any known table section")

    if version is None:
        Where(command).fail("no 'npu-smi <ver> Version: <ver>' header (empty or not npu-smi output)")
    if pending is not None:
        pending[4].fail("truncated: NPU row without its chip row")
    if section is None:
        Where(command).fail("truncated: no device table after the header")
    if section != "processes":
        Where(command).fail("truncated: no process table after the device table")
    if any(c.phy_id is None for c in chips) and any(c.phy_id is not None for c in chips):
        Where(command).fail("some chip rows carry a Phy-ID and others do not")
    return NpuSmiInfo(version, driver or version, tuple(chips), tuple(processes))


# ------------------------------------------------------------------------------------------ npu-smi info -t board


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
    chip's ``Firmware Version`` instead (no Software Version, no Compatibility). ../shared/reference/ascend.md §3.2.
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
    chip_count = _int(pairs["Chip Count"], where, "Chip Count") if "Chip Count" in pairs else None
    if chip_count is not None and chip_count < 1:
        where.fail(f"Chip Count is {chip_count}: an NPU has at least one chip")
    return BoardInfo(
        npu_id=_int(pairs["NPU ID"], where, "NPU ID"),
        software_version=pairs.get("Software Version"),
        firmware_version=pairs.get("Firmware Version"),
        compatibility=pairs.get("Compatibility"),
        fields=pairs,
        chip_count=chip_count,
        chip_id=_int(pairs["Chip ID"], where, "Chip ID") if "Chip ID" in pairs else None,
        chip_name=pairs.get("Chip Name"),
    )
