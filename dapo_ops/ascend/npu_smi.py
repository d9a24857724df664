"""Parser of the ``npu-smi info`` table: per chip its health, temperature, power, HBM and bus id; the NPU processes.

parse_npu_smi_info takes the raw text (and the command it came from, for the error) and returns a frozen
NpuSmiInfo; malformed or truncated output raises ``ParseError`` naming the command and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dapo_ops.ascend.where import Where


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


@dataclass(frozen=True)
class _NpuRow:
    """An NPU row of the device table, awaiting its chip row."""

    npu_id: int
    name: str
    health: str
    metrics: list[str]  # Power(W), Temp(C), Hugepages-Usage
    where: Where


_CHIP_ROW = {1: "'Chip'", 2: "'Chip Phy-ID'"}  # what a chip row holds, by the number of ids its header names


class _Table:
    """One pass over an ``npu-smi info`` table: row() takes each '|' row in turn, result() checks the end."""

    def __init__(self, command: str):
        self.command = command
        self.version = self.driver = None
        self.chips: list[NpuChip] = []
        self.processes: list[NpuProcess] = []
        self.section = None  # "devices" | "processes"
        self.device_cells = 3
        self.chip_ids: int | None = None  # ids per chip row: 1 (Chip) or 2 (Chip Phy-ID); None: no header seen
        self.process_cells = 4
        self.pending: _NpuRow | None = None
        self.seen: set[tuple[int, int]] = set()  # (NPU id, chip id)
        self.phys: set[int] = set()

    def row(self, cells: list[str], where: Where) -> None:
        header = _HEADER.search(" ".join(cells))
        first = cells[0] if cells else ""
        if header and self.version is None:
            self.version, self.driver = header.group(1), header.group(2)
        elif first.startswith("NPU") and "Name" in first:
            self.device_header(cells, where)
        elif first.startswith("Chip") and len(cells) >= 2 and cells[1].startswith("Bus-Id"):
            self.chip_header(cells, where)
        elif first.startswith("NPU") and "Chip" in first:
            self.process_header(cells, where)
        elif self.section == "devices":
            self.device_row(cells, where)
        elif self.section == "processes":
            self.process_row(cells, where)
        else:
            where.fail("row outside any known table section")

    def device_header(self, cells: list[str], where: Where) -> None:
        if self.section is not None:
            where.fail("a second device table header")
        self.section, self.device_cells = "devices", len(cells)
        if self.device_cells < 3:
            where.fail(f"expected at least 3 cells in the device header, got {self.device_cells}")

    def chip_header(self, cells: list[str], where: Where) -> None:
        if self.section != "devices" or self.chip_ids is not None:
            where.fail("chip header outside the device table header")
        self.chip_ids = _chip_header_ids(cells[0], where)

    def process_header(self, cells: list[str], where: Where) -> None:
        if self.pending is not None:
            self.pending.where.fail("NPU row without its chip row")
        self.section, self.process_cells = "processes", len(cells)
        if self.process_cells < 4:
            where.fail(f"expected at least 4 cells in the process header, got {self.process_cells}")

    def device_row(self, cells: list[str], where: Where) -> None:
        if len(cells) != self.device_cells:
            where.fail(f"expected {self.device_cells} cells, got {len(cells)}")
        first = cells[0].split()
        if self.pending is None:
            if len(first) < 2:
                where.fail("expected 'NPU-ID Name'")
            self.pending = _NpuRow(where.integer(first[0], "NPU id"), " ".join(first[1:]), cells[1],
                                   _split_metrics(cells[2], 3, where), where)
        else:
            self.chips.append(self.chip(self.pending, first, cells, where))
            self.pending = None

    def chip(self, npu: _NpuRow, ids: list[str], cells: list[str], where: Where) -> NpuChip:
        expected_ids = self.chip_ids or len(ids)
        if len(ids) != expected_ids or expected_ids not in (1, 2):
            want = _CHIP_ROW.get(self.chip_ids, "'Chip [Phy-ID]'")
            where.fail(f"expected the chip row ({want}) after an NPU row")
        chip_id = where.integer(ids[0], "chip id")
        phy_id = where.integer(ids[1], "Phy-ID") if len(ids) == 2 else None
        if (npu.npu_id, chip_id) in self.seen:
            where.fail(f"NPU {npu.npu_id} chip {chip_id} is listed twice")
        if phy_id is not None and phy_id in self.phys:
            where.fail(f"Phy-ID {phy_id} is listed twice")
        self.seen.add((npu.npu_id, chip_id))
        self.phys.update(() if phy_id is None else (phy_id,))
        second = _split_metrics(cells[2], 3, where)
        hp_used, hp_total = _pair(npu.metrics[2], where, "Hugepages-Usage")
        mem_used, mem_total = _pair(second[1], where, "Memory-Usage")
        hbm_used, hbm_total = _pair(second[2], where, "HBM-Usage")
        return NpuChip(
            npu_id=npu.npu_id, chip_id=chip_id, name=npu.name, health=npu.health,
            power_w=_optional_number(npu.metrics[0], float, where, "Power(W)"),
            temp_c=_optional_number(npu.metrics[1], int, where, "Temp(C)"),
            hugepages_used=hp_used, hugepages_total=hp_total, bus_id=cells[1],
            aicore_pct=_optional_number(second[0], int, where, "AICore(%)"),
            memory_used_mb=mem_used, memory_total_mb=mem_total, hbm_used_mb=hbm_used, hbm_total_mb=hbm_total,
            phy_id=phy_id,
        )

    def process_row(self, cells: list[str], where: Where) -> None:
        if len(cells) == 1 and cells[0].startswith("No running processes found"):
            return
        if len(cells) != self.process_cells:
            where.fail(f"expected {self.process_cells} cells in a process row, got {len(cells)}")
        ids = cells[0].split()
        if len(ids) != 2:
            where.fail("expected 'NPU Chip' in a process row")
        self.processes.append(NpuProcess(
            npu_id=where.integer(ids[0], "NPU id"),
            chip_id=where.integer(ids[1], "chip id"),
            pid=where.integer(cells[1], "process id"),
            name=cells[2],
            memory_mb=where.integer(cells[3], "process memory"),
        ))

    def result(self) -> NpuSmiInfo:
        whole = Where(self.command)
        if self.version is None:
            whole.fail("no 'npu-smi <ver> Version: <ver>' header (empty or not npu-smi output)")
        if self.pending is not None:
            self.pending.where.fail("truncated: NPU row without its chip row")
        if self.section is None:
            whole.fail("truncated: no device table after the header")
        if self.section != "processes":
            whole.fail("truncated: no process table after the device table")
        if any(c.phy_id is None for c in self.chips) and any(c.phy_id is not None for c in self.chips):
            whole.fail("some chip rows carry a Phy-ID and others do not")
        return NpuSmiInfo(self.version, self.driver or self.version, tuple(self.chips), tuple(self.processes))


def parse_npu_smi_info(text: str, command: str = "npu-smi info") -> NpuSmiInfo:
    """The ``npu-smi info`` table, split on '|' (cell widths differ between npu-smi releases).

    One row-pair per chip: the NPU row (``NPU-ID Name | Health | Power Temp Hugepages``) then the chip row
    (``Chip [Phy-ID] | Bus-Id | AICore Memory HBM``). A 910B has one pair per NPU and a ``Chip`` header; an Atlas
    800T A3 has two pairs per NPU (chip 0 and chip 1, each repeating the NPU id and name, split by a ``+---+`` line)
    and a ``Chip  Phy-ID`` header, its chip rows carrying the chip id and the Phy-ID. The process table that
    follows names ``NPU Chip`` per row; later npu-smi releases add a trailing ``Process id in container`` column
    (read and ignored). Public samples: 910B tables in vllm-project/vllm-ascend issues #1130 and #5707 (the latter
    with a 5-digit HBM use, ``59891/ 65536``), A3 tables in #2035 (24.1.rc3.7) and #2534, the wider 26.x cells in
    #12980; the samples under tests/data/ascend/ follow them.
    """
    table = _Table(command)
    for line_no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("+"):
            continue
        where = Where(command, line_no, line)
        if not (stripped.startswith("|") and stripped.endswith("|")):
            where.fail("line is not a table row")
        table.row(_cells(stripped), where)
    return table.result()
