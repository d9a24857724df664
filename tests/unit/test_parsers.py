import pytest

from dapo_ops.ascend import parsers as p
from dapo_ops.errors import ParseError


def read(data_dir, name):
    return (data_dir / "ascend" / name).read_text()


def test_npu_smi_info_real_8npu_dump_with_processes(data_dir):
    info = p.parse_npu_smi_info(read(data_dir, "npu-smi-info-8npu-processes.txt"))
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
    info = p.parse_npu_smi_info(text.replace("Warning", "OK      "))
    assert all(c.health == "OK" for c in info.chips)


@pytest.mark.parametrize("mutate, reason", [
    (lambda t: "", "no 'npu-smi"),
    (lambda t: "\n".join(t.splitlines()[:7]), "NPU row without its chip row"),
    (lambda t: "\n".join(t.splitlines()[:9]), "no process table"),
    (lambda t: t.replace("| 0                         | 0000:C1:00.0  |", "| x                         | 0000:C1:00.0  |"),
     "chip id is not an integer"),
    (lambda t: t.replace("60478/ 65536", "60478 65536 "), "expected 3 fields in the metrics cell"),
    (lambda t: t.replace("60478/ 65536", "60478/ lots "), "HBM-Usage"),
    (lambda t: t + "garbage that is not a table row\n", "not a table row"),
    (lambda t: t.replace("| 0     910B3               | OK            | 102.8       55",
                         "| 0     910B3               | OK            | 102.8       hot"), "Temp(C)"),
])
def test_npu_smi_info_malformed_names_command_and_line(data_dir, mutate, reason):
    text = mutate(read(data_dir, "npu-smi-info-8npu-processes.txt"))
    with pytest.raises(ParseError) as err:
        p.parse_npu_smi_info(text)
    assert err.value.command == "npu-smi info"
    assert reason in str(err.value)


def test_npu_smi_list(data_dir):
    parsed = p.parse_npu_smi_list(read(data_dir, "npu-smi-list.txt"))
    assert parsed.total_count == 8
    assert [n.npu_id for n in parsed.npus] == list(range(8))
    assert all(n.chip_count == 1 for n in parsed.npus)


def test_npu_smi_list_truncated(data_dir):
    text = read(data_dir, "npu-smi-list.txt")
    with pytest.raises(ParseError, match="Total Count' says 8"):
        p.parse_npu_smi_list("\n".join(text.splitlines()[:-3]))
    with pytest.raises(ParseError, match="empty output"):
        p.parse_npu_smi_list("")


def test_npu_smi_chip_map():
    text = ("\tNPU ID                         Chip ID                        Chip Logic ID                  Chip Name\n"
            "\t0                              0                              0                              Ascend 910B3\n"
            "\t0                              1                              -                              Mcu\n")
    entries = p.parse_npu_smi_chip_map(text)
    assert entries[0] == p.ChipMapEntry(0, 0, 0, "Ascend 910B3")
    assert entries[1] == p.ChipMapEntry(0, 1, None, "Mcu")
    with pytest.raises(ParseError, match="header"):
        p.parse_npu_smi_chip_map("0 0 0 Ascend\n")
    with pytest.raises(ParseError, match="4 columns"):
        p.parse_npu_smi_chip_map(text.splitlines()[0] + "\n\t0  0\n")


def test_npu_smi_board(data_dir):
    board = p.parse_npu_smi_board(read(data_dir, "npu-smi-board.txt"))
    assert (board.npu_id, board.software_version, board.firmware_version, board.compatibility) == (
        0, "25.5.1", "7.8.0.6.201", "OK")
    assert board.fields["PCIe Bus Info"] == "0000:C1:00.0"
    with pytest.raises(ParseError, match="NPU ID"):
        p.parse_npu_smi_board("\tSoftware Version               : 25.5.1\n")
    with pytest.raises(ParseError, match="key : value"):
        p.parse_npu_smi_board("npu-smi: command not found\n")


def test_npu_smi_health(data_dir):
    health = p.parse_npu_smi_health(read(data_dir, "npu-smi-health.txt"))
    assert (health.npu_id, health.health, health.mcu_health) == (0, "OK", "OK")
    alarm = read(data_dir, "npu-smi-health.txt").replace("Health                         : OK\n\n", "Health                         : Alarm\n\n", 1)
    assert p.parse_npu_smi_health(alarm).health == "Alarm"
    with pytest.raises(ParseError, match="truncated"):
        p.parse_npu_smi_health("\tNPU ID                         : 0\n\tChip Count                     : 1\n")


def test_npu_smi_temp(data_dir):
    temp = p.parse_npu_smi_temp(read(data_dir, "npu-smi-temp.txt"))
    assert (temp.npu_id, temp.npu_temp_c) == (0, 39)
    assert temp.sensors == {"LM75A_TE (C)": 36, "LM75B_TE (C)": 36}
    with pytest.raises(ParseError, match="not an integer"):
        p.parse_npu_smi_temp(read(data_dir, "npu-smi-temp.txt").replace(": 39", ": hot"))


def test_npu_smi_usages():
    keys = [("DDR Capacity(MB)", 0), ("HBM Capacity(MB)", 65536), ("HBM Usage Rate(%)", 5), ("Aicore Usage Rate(%)", 0)]
    text = "".join("\t%-30s : %s\n" % kv for kv in keys)
    usage = p.parse_npu_smi_usages(text)
    assert (usage.hbm_capacity_mb, usage.hbm_usage_pct, usage.hbm_used_mb) == (65536, 5, 3276)
    with pytest.raises(ParseError, match="HBM Capacity"):
        p.parse_npu_smi_usages("\t%-30s : %s\n" % ("DDR Capacity(MB)", 0))


def test_hccn_tool_outputs():
    assert p.parse_hccn_link("link status: UP\n") == "UP"
    assert p.parse_hccn_link("link status: DOWN") == "DOWN"
    assert p.parse_hccn_net_health("net health status: Success\n") == "Success"
    assert p.parse_hccn_net_health("net health status: Fault\n") == "Fault"
    ip = p.parse_hccn_ip("ipaddr:10.86.1.80\nnetmask:255.255.255.0\n")
    assert (ip.address, ip.netmask, ip.configured) == ("10.86.1.80", "255.255.255.0", True)
    missing = p.parse_hccn_ip("Get ipconf failed, because no ip was preset there!\n")
    assert not missing.configured


@pytest.mark.parametrize("parser, text, reason", [
    (p.parse_hccn_link, "", "empty output"),
    (p.parse_hccn_link, "link status: SIDEWAYS", "unknown link status"),
    (p.parse_hccn_link, "device id 9 is invalid", "expected 'link status"),
    (p.parse_hccn_net_health, "net health status:", "empty net health"),
    (p.parse_hccn_ip, "ipaddr:10.86.1.80\n", "truncated"),
    (p.parse_hccn_ip, "ipaddr:not-an-ip\nnetmask:255.255.255.0", "not an IPv4"),
    (p.parse_hccn_ip, "hello", "expected 'ipaddr:'"),
])
def test_hccn_tool_malformed(parser, text, reason):
    with pytest.raises(ParseError, match=reason):
        parser(text)


def test_version_files(data_dir):
    driver = p.parse_version_info(read(data_dir, "driver-version.info"), "cat driver/version.info")
    assert driver["Version"] == "25.0.rc1.1"
    assert driver["compatible_version_fw"] == "[7.0.0,7.7.99]"
    firmware = p.parse_version_info(read(data_dir, "firmware-version.info"))
    assert firmware["compatible_version_drv"].endswith("[25.0,25.0.]")
    toolkit = p.parse_toolkit_install_info(read(data_dir, "ascend_toolkit_install.info"))
    assert (toolkit["version"], toolkit["innerversion"]) == ("8.3.RC1", "V100R001C23SPC001B235")
    nnal = p.parse_nnal_version_info("Ascend-cann-atb : 8.3.RC1\nAscend-cann-atb Version : 8.3.RC1.B235\n")
    assert nnal["Ascend-cann-atb"] == "8.3.RC1"


@pytest.mark.parametrize("text, reason", [
    ("", "empty or truncated"),
    ("Version 25.0.rc1.1\n", "expected 'key=value'"),
    ("=25\n", "empty key"),
    ("package_version=25.0.rc1.1\n", "missing Version="),
])
def test_version_info_malformed(text, reason):
    with pytest.raises(ParseError) as err:
        p.parse_version_info(text, "cat /usr/local/Ascend/driver/version.info")
    assert reason in str(err.value)
    assert "cat /usr/local/Ascend/driver/version.info" in str(err.value)


PARSERS = [
    (p.parse_npu_smi_info, "npu-smi-info-8npu-processes.txt"),
    (p.parse_npu_smi_list, "npu-smi-list.txt"),
    (p.parse_npu_smi_board, "npu-smi-board.txt"),
    (p.parse_npu_smi_health, "npu-smi-health.txt"),
    (p.parse_npu_smi_temp, "npu-smi-temp.txt"),
    (p.parse_version_info, "driver-version.info"),
    (p.parse_toolkit_install_info, "ascend_toolkit_install.info"),
]


@pytest.mark.parametrize("parser, sample", PARSERS)
def test_truncated_and_mangled_input_only_ever_raises_parse_error(data_dir, parser, sample):
    """Every line-prefix and a few hundred seeded mutations: a result or a ParseError, nothing else."""
    import random

    text = read(data_dir, sample)
    lines = text.splitlines(keepends=True)
    candidates = ["".join(lines[:k]) for k in range(len(lines) + 1)]
    rng = random.Random(sample)
    for _ in range(300):
        chars = list(text)
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(chars))
            action = rng.choice(("delete", "replace", "insert"))
            if action == "delete":
                del chars[i]
            elif action == "replace":
                chars[i] = rng.choice("|/:= \n0x-abc")
            else:
                chars.insert(i, rng.choice("|/:= \n9"))
        candidates.append("".join(chars))
    for candidate in candidates:
        try:
            parser(candidate)
        except ParseError:
            pass
