"""The npu-smi info table and npu-smi info -t board parsers, on recorded 910B and Atlas 800T A3 output."""

import pytest

from dapo_ops.ascend import npu_smi, npu_smi_board
from dapo_ops.errors import ParseError

from .mangle import mangled


def read(data_dir, name):
    return (data_dir / "ascend" / name).read_text()


def test_npu_smi_info_real_8npu_dump_with_processes(data_dir):
    info = npu_smi.parse_npu_smi_info(read(data_dir, "npu-smi-info-8npu-processes.txt"))
    assert info.npu_smi_version == "25.0.rc1.1"
    assert info.driver_version == "25.0.rc1.1"
    assert info.npu_ids == list(range(8))
    first = info.chips[0]
    assert (first.name, first.health, first.bus_id) == ("910B3", "OK", "0000:C1:00.0")
    assert first.power_w == pytest.approx(102.8)
    assert first.temp_c == 55
    assert (first.hbm_used_mb, first.hbm_total_mb) == (60478, 65536)  # 5 digits: no space before '/'
    assert (first.memory_used_mb, first.memory_total_mb) == (0, 0)
    assert info.chips[3].health == "Warning"
    assert [(x.pid, x.name, x.memory_mb) for x in info.processes] == [(3755936, "python", 52245), (3755990, "", 4096)]


def test_npu_smi_info_no_processes_16npu(data_dir):
    text = read(data_dir, "npu-smi-info-8npu-processes.txt")
    info = npu_smi.parse_npu_smi_info(text.replace("Warning", "OK      "))
    assert info.npu_ids == list(range(8)) and all(c.health == "OK" for c in info.chips)


@pytest.mark.parametrize("mutate, reason", [
    (lambda t: "", "no 'npu-smi"),
    (lambda t: "\n".join(t.splitlines()[:7]), "NPU row without its chip row"),
    (lambda t: "\n".join(t.splitlines()[:9]), "no process table"),
    (lambda t: t.replace("| 0                         | 0000:C1:00.0  |", "| x                         | 0000:C1:00.0  |"),
     "chip id is not an integer"),
    (lambda t: t.replace("60478/ 65536", "60478 65536 "), "expected 3 fields in the metrics cell"),
    (lambda t: t.replace("60478/ 65536", "60478/ lots "), "HBM-Usage"),
    (lambda t: t + "trailing garbage\n", "line is not a table row"),  # the message quotes the line: not the reason
    (lambda t: t.replace("| 0     910B3               | OK            | 102.8       55",
                         "| 0     910B3               | OK            | 102.8       hot"), "Temp(C)"),
])
def test_npu_smi_info_malformed_names_command_and_line(data_dir, mutate, reason):
    text = mutate(read(data_dir, "npu-smi-info-8npu-processes.txt"))
    with pytest.raises(ParseError) as err:
        npu_smi.parse_npu_smi_info(text)
    assert err.value.command == "npu-smi info"
    assert reason in str(err.value)


A3 = ("npu-smi-info-a3-healthy.txt", "npu-smi-info-a3-chip-warning.txt", "npu-smi-info-a3-processes.txt",
      "npu-smi-info-a3-wide.txt")


def test_npu_smi_info_910b_has_one_device_per_npu(data_dir):
    info = npu_smi.parse_npu_smi_info(read(data_dir, "npu-smi-info-8npu-processes.txt"))
    assert not info.multi_chip
    assert [(c.npu_id, c.chip_id, c.phy_id, c.device_id) for c in info.chips] == [(n, 0, None, n) for n in range(8)]
    assert info.device_ids == info.npu_ids == list(range(8))


def test_npu_smi_info_a3_16_chips_on_8_npus(data_dir):
    """Atlas 800T A3: two row-pairs per NPU, 'Chip  Phy-ID' header, '-' power on the second chip."""
    info = npu_smi.parse_npu_smi_info(read(data_dir, "npu-smi-info-a3-healthy.txt"))
    assert info.multi_chip
    assert info.npu_ids == list(range(8)) and info.device_ids == list(range(16))
    assert [(c.npu_id, c.chip_id, c.phy_id) for c in info.chips] == [
        (n, k, 2 * n + k) for n in range(8) for k in (0, 1)]
    assert {c.name for c in info.chips} == {"Ascend910"} and {c.health for c in info.chips} == {"OK"}
    first, second = info.chips_of(0)
    assert first.power_w == pytest.approx(171.2) and second.power_w is None
    assert (first.temp_c, second.temp_c) == (35, 36)
    assert (second.bus_id, second.hbm_used_mb, second.hbm_total_mb) == ("0000:43:00.0", 2887, 65536)
    assert info.processes == ()


def test_npu_smi_info_a3_warning_on_one_chip(data_dir):
    info = npu_smi.parse_npu_smi_info(read(data_dir, "npu-smi-info-a3-chip-warning.txt"))
    assert [(c.npu_id, c.chip_id, c.phy_id, c.health) for c in info.chips if c.health != "OK"] == [(3, 1, 7, "Warning")]
    assert info.chips_of(3)[0].health == "OK"


@pytest.mark.parametrize("sample", ["npu-smi-info-a3-processes.txt", "npu-smi-info-a3-wide.txt"])
def test_npu_smi_info_a3_processes_name_npu_and_chip(data_dir, sample):
    """The A3 process table names NPU and chip; 26.x widens the cells and adds 'Process id in container'."""
    info = npu_smi.parse_npu_smi_info(read(data_dir, sample))
    expected = [(0, 0, 20481, "python", 38016), (1, 1, 20533, "VLLMWorker_TP", 38096), (1, 1, 20534, "", 512)]
    wide = sample.endswith("wide.txt")
    assert info.npu_smi_version == ("26.0.rc1" if wide else "25.0.rc1.1")
    assert [(x.npu_id, x.chip_id, x.pid, x.name, x.memory_mb) for x in info.processes] == expected[:1 if wide else 3]
    busy = {(c.npu_id, c.chip_id): (c.hbm_used_mb, c.aicore_pct) for c in info.chips if c.hbm_used_mb > 8192}
    assert busy == {(0, 0): (41250, 37), (1, 1): (41253, 37)}
    assert len(info.chips) == 16


def _respace(text: str, how: str) -> str:
    import re

    if how == "single":  # every run of spaces becomes one: the cell padding is gone
        return re.sub(r" {2,}", " ", text)
    if how == "padded":  # more padding around every bar, and trailing blanks after the row
        return "\n".join(re.sub(r"\|", "  |  ", line).strip() + "   " if line.startswith("|") else line
                         for line in text.splitlines())
    if how == "header-spacing":  # an A3's chip header: 'Chip  Phy-ID' (25.x) and 'Chip Phy-ID' (26.x), swapped
        if "| Chip  Phy-ID " in text:
            return text.replace("| Chip  Phy-ID ", "| Chip Phy-ID  ")
        return text.replace("| Chip Phy-ID  ", "| Chip  Phy-ID ")
    raise AssertionError(how)


SPACINGS = [(sample, how) for sample in ("npu-smi-info-8npu-processes.txt", *A3) for how in ("single", "padded")]
SPACINGS += [(sample, "header-spacing") for sample in A3]  # a 910B's header has no Phy-ID


@pytest.mark.parametrize("sample, how", SPACINGS)
def test_npu_smi_info_spacing_does_not_matter(data_dir, sample, how):
    text = read(data_dir, sample)
    respaced = _respace(text, how)
    assert respaced != text  # else the parse below is compared with itself
    assert npu_smi.parse_npu_smi_info(respaced) == npu_smi.parse_npu_smi_info(text)


def test_npu_smi_info_chip_name_with_suffix(data_dir):
    text = read(data_dir, "npu-smi-info-8npu-processes.txt").replace("910B3  ", "910B4-1")
    assert {c.name for c in npu_smi.parse_npu_smi_info(text).chips} == {"910B4-1"}
    a3 = read(data_dir, "npu-smi-info-a3-healthy.txt").replace("Ascend910  ", "910B4-1    ")
    assert {c.name for c in npu_smi.parse_npu_smi_info(a3).chips} == {"910B4-1"}


@pytest.mark.parametrize("sample, old, new, reason", [
    ("npu-smi-info-a3-healthy.txt", "| 1     1                   | 0000:43", "| 1                         | 0000:43",
     "expected the chip row ('Chip Phy-ID') after an NPU row"),
    ("npu-smi-info-a3-healthy.txt", "| 1     1                   | 0000:43", "| 1     0                   | 0000:43",
     "Phy-ID 0 is listed twice"),
    ("npu-smi-info-a3-healthy.txt", "| 1     1                   | 0000:43", "| 0     1                   | 0000:43",
     "NPU 0 chip 0 is listed twice"),
    ("npu-smi-info-a3-healthy.txt", "| 1     1                   | 0000:43", "| 1     x                   | 0000:43",
     "Phy-ID is not an integer"),
    ("npu-smi-info-a3-healthy.txt", "| Chip  Phy-ID              |", "| Chip  Slot                |",
     "unknown chip header column 'Slot'"),
    ("npu-smi-info-a3-healthy.txt", "| -           36", "| -           hot", "Temp(C)"),
    ("npu-smi-info-a3-wide.txt", "| 38016                 | NA                      |", "| 38016                 |",
     "expected 5 cells in a process row, got 4"),
    ("npu-smi-info-8npu-processes.txt",
     "| 0                         | 0000:C1", "| 0     0                   | 0000:C1",
     "expected the chip row ('Chip') after an NPU row"),
])
def test_npu_smi_info_a3_malformed(data_dir, sample, old, new, reason):
    text = read(data_dir, sample)
    assert old in text
    with pytest.raises(ParseError) as err:
        npu_smi.parse_npu_smi_info(text.replace(old, new, 1))
    assert err.value.command == "npu-smi info"
    assert reason in str(err.value)


def test_npu_smi_board(data_dir):
    board = npu_smi_board.parse_npu_smi_board(read(data_dir, "npu-smi-board.txt"))
    assert (board.npu_id, board.software_version, board.firmware_version, board.compatibility) == (
        0, "25.5.1", "7.8.0.6.201", "OK")
    assert board.fields["PCIe Bus Info"] == "0000:C1:00.0"
    with pytest.raises(ParseError, match="NPU ID"):
        npu_smi_board.parse_npu_smi_board("\tSoftware Version               : 25.5.1\n")
    with pytest.raises(ParseError, match="key : value"):
        npu_smi_board.parse_npu_smi_board("npu-smi: command not found\n")
    assert (board.chip_count, board.chip_id) == (1, None)


def test_npu_smi_board_a3(data_dir):
    """A3: `-t board -i N` reports Chip Count 2; `-i N -c CHIP` is one chip (no driver, no Compatibility)."""
    board = npu_smi_board.parse_npu_smi_board(read(data_dir, "npu-smi-board-a3.txt"))
    assert (board.npu_id, board.chip_count, board.chip_id) == (0, 2, None)
    assert (board.software_version, board.firmware_version, board.compatibility) == ("25.0.rc1.1", "7.7.0.1.231", "OK")
    chip = npu_smi_board.parse_npu_smi_board(read(data_dir, "npu-smi-board-a3-chip.txt"), "npu-smi info -t board -i 0 -c 1")
    assert (chip.npu_id, chip.chip_id, chip.chip_name, chip.chip_count) == (0, 1, "Ascend910", None)
    assert (chip.software_version, chip.firmware_version, chip.compatibility) == (None, "7.7.0.1.231", None)
    # a chip block after the NPU's own block does not override the NPU's values
    chip_block = read(data_dir, "npu-smi-board-a3-chip.txt").replace("7.7.0.1.231", "9.9.9")
    both = npu_smi_board.parse_npu_smi_board(read(data_dir, "npu-smi-board-a3.txt") + "\n" + chip_block)
    assert (both.firmware_version, both.chip_count, both.chip_id) == ("7.7.0.1.231", 2, 1)
    for bad, reason in (("0", "at least one chip"), ("two", "Chip Count is not an integer")):
        text = read(data_dir, "npu-smi-board-a3.txt").replace("Chip Count                     : 2",
                                                              f"Chip Count                     : {bad}")
        with pytest.raises(ParseError, match=reason):
            npu_smi_board.parse_npu_smi_board(text)


@pytest.mark.parametrize("parser, sample", [
    (npu_smi.parse_npu_smi_info, "npu-smi-info-8npu-processes.txt"),
    (npu_smi_board.parse_npu_smi_board, "npu-smi-board.txt"),
    (npu_smi.parse_npu_smi_info, "npu-smi-info-a3-healthy.txt"),
    (npu_smi.parse_npu_smi_info, "npu-smi-info-a3-processes.txt"),
    (npu_smi.parse_npu_smi_info, "npu-smi-info-a3-wide.txt"),
    (npu_smi_board.parse_npu_smi_board, "npu-smi-board-a3.txt"),
    (npu_smi_board.parse_npu_smi_board, "npu-smi-board-a3-chip.txt"),
])
def test_truncated_and_mangled_input_only_ever_raises_parse_error(data_dir, parser, sample):
    """Every line-prefix and a few hundred seeded mutations: a result or a ParseError, nothing else."""
    for candidate in mangled(read(data_dir, sample), sample):
        try:
            parser(candidate)
        except ParseError:
            pass


def test_ansible_filters_return_what_the_audit_facts_record(data_dir):
    """filter_plugins/dapo_ops.py: dapo_npu_smi_info, dapo_npu_smi_board and dapo_hccn_ip give the roles the shape
    the audit facts record (a chip's NPU is npu_id; an A3 entry also names its chip and device)."""
    import importlib.util

    from dapo_ops.audit.fact import all_facts
    from dapo_ops.paths import PROJECT_ROOT

    spec = importlib.util.spec_from_file_location("dapo_filters_a3", PROJECT_ROOT / "filter_plugins" / "dapo_ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    filters, facts = module.FilterModule().filters(), all_facts()
    npu_smi_info = filters["dapo_npu_smi_info"]
    b = npu_smi_info(read(data_dir, "npu-smi-info-8npu-processes.txt"))
    assert b == facts["npu_smi_info"].parse(read(data_dir, "npu-smi-info-8npu-processes.txt"))
    assert b["driver_version"] == "25.0.rc1.1"
    keys = ("npu_id", "name", "health", "temp_c", "hbm_used_mb", "hbm_total_mb", "bus_id")
    assert {k: b["npus"][0][k] for k in keys} == {
        "npu_id": 0, "name": "910B3", "health": "OK", "temp_c": 55, "hbm_used_mb": 60478, "hbm_total_mb": 65536,
        "bus_id": "0000:C1:00.0"}
    a3 = npu_smi_info(read(data_dir, "npu-smi-info-a3-chip-warning.txt"))
    assert [(n["npu_id"], n["chip_id"], n["device_id"]) for n in a3["npus"] if n["health"] != "OK"] == [(3, 1, 7)]
    assert npu_smi_info(None) is None
    board = read(data_dir, "npu-smi-board-a3.txt")
    assert filters["dapo_npu_smi_board"](board) == facts["board"].parse(board)
    assert filters["dapo_hccn_ip"]("ipaddr:10.86.1.80\nnetmask:255.255.255.0\n") == {
        "address": "10.86.1.80", "netmask": "255.255.255.0"}
    assert filters["dapo_hccn_ip"](None) == {"address": None, "netmask": None}
