"""The hardware model, its fault knobs, and the emulated tools' output read back by the real parsers."""

import json
import os
import subprocess
import sys

import pytest

from dapo_ops.ascend import hccn_tool, npu_smi, npu_smi_board
from dapo_ops.errors import UsageError
from dapo_ops.manifest import load_manifest
from dapo_sim import hwmodel
from dapo_sim.artifacts import ASSETS

EMU = ASSETS / "ascend_emu.py"


def model(npus=16, faults=(), name="node1"):
    parsed = [hwmodel.parse_fault(f) for f in faults]
    return hwmodel.build_node_model(name, 1, npus, parsed, chip_name="910B3", hbm_mb=65536,
                                    factory_firmware="7.1.0.7.220", mcu_version="23.3.13")


class Node:
    """A node's hardware model and /usr/local/Ascend in a temp dir, with the emulator pointed at them."""

    def __init__(self, tmp_path, hw, driver_loaded=True):
        self.hw_dir = tmp_path / "hw"
        self.ascend = tmp_path / "Ascend"
        self.hw_dir.mkdir()
        (self.ascend / "driver").mkdir(parents=True)
        manifest = load_manifest()
        info = manifest.artifact("driver").version_info
        (self.ascend / "driver" / "version.info").write_text("".join(f"{k}={v}\n" for k, v in info.items()))
        if driver_loaded:
            hw["driver"]["loaded"] = info["Version"]
        (self.hw_dir / "hw.json").write_text(json.dumps(hw))
        self.env = dict(os.environ, DAPO_SIM_HW_DIR=str(self.hw_dir), DAPO_SIM_ASCEND=str(self.ascend),
                        DAPO_SIM_HCCN_CONF=str(tmp_path / "hccn.conf"))

    def run(self, tool, *args, ok=True):
        result = subprocess.run([sys.executable, str(EMU), tool, *args], capture_output=True, text=True,
                                env=self.env, timeout=30)
        if ok:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def hw(self):
        return json.loads((self.hw_dir / "hw.json").read_text())


@pytest.mark.parametrize("spec, message", [
    ("node1", "expected NODE"),
    ("node1:color=red", "unknown node knob"),
    ("node1.gpu3:health=Warning", "is not npuK"),
    ("node1.npu3:health=Sad", "health must be one of"),
    ("node1.npu3:temp=hot", "whole number"),
    ("node1.npu3:missing=yes", "takes no value"),
    ("node1:firmware", "needs a value"),
    ("node1.npu1:link=SIDEWAYS", "UP or DOWN"),
    ("node1:hdk=whatever", "out-of-range"),
    ("node1:host-mem-gib=lots", "whole number of GiB"),
    ("node1:host-mem-gib=0", "whole number of GiB"),
])
def test_bad_fault_specs(spec, message):
    with pytest.raises(UsageError, match=message):
        hwmodel.parse_fault(spec)


def test_a_nodes_memory_is_the_knobs_and_its_meminfo_keeps_the_hosts_use():
    built = hwmodel.build_node_model("node2", 2, 8, [hwmodel.parse_fault("node2:host-mem-gib=64")], chip_name="910B3",
                                     hbm_mb=65536, factory_firmware="7.7.0.1.231", mcu_version="25.50.10")
    assert built["host_mem_gib"] == 64
    other = hwmodel.build_node_model("node1", 1, 8, [hwmodel.parse_fault("node2:host-mem-gib=64")], chip_name="910B3",
                                     hbm_mb=65536, factory_firmware="7.7.0.1.231", mcu_version="25.50.10")
    assert other["host_mem_gib"] == hwmodel.SIM_HOST_MEM_GIB
    host = ("MemTotal:       24683664 kB\nMemFree:        20000000 kB\nMemAvailable:   23000000 kB\n"
            "Cached:          1000000 kB\nHugePages_Total:       0\n")
    fields = {line.split(":")[0]: line.split()[1] for line in hwmodel.meminfo(host, 64).splitlines()}
    total = 64 << 20
    assert fields["MemTotal"] == str(total) and fields["Cached"] == "1000000" and fields["HugePages_Total"] == "0"
    assert total - int(fields["MemAvailable"]) == 24683664 - 23000000        # what the host uses stays used
    assert int(fields["MemFree"]) == 20000000 + total - 24683664
    from dapo_ops.audit.facts.host_memory import parse

    assert parse(hwmodel.meminfo(host, 64))["mem_total_gib"] == 64.0
    tiny = {line.split(":")[0]: int(line.split()[1]) for line in hwmodel.meminfo(host, 1).splitlines()}
    assert tiny["MemAvailable"] <= tiny["MemTotal"] and tiny["MemFree"] >= 0


def test_fault_targets_are_checked():
    faults = [hwmodel.parse_fault("node3.npu1:missing")]
    with pytest.raises(UsageError, match="no node 'node3'"):
        hwmodel.validate_faults(faults, ["node1", "node2"], 16)
    with pytest.raises(UsageError, match="NPU 9 does not exist"):
        hwmodel.validate_faults([hwmodel.parse_fault("node1.npu9:missing")], ["node1"], 8)


def test_hdk_start():
    fw_driver = {"7.5.0.1.129": "24.1.rc3", "7.3.0.1.231": "24.1.rc2"}
    start = lambda faults, prov=False: hwmodel.hdk_start(  # noqa: E731
        "node2", [hwmodel.parse_fault(f) for f in faults], prov, "PIN-DRV", "PIN-FW", fw_driver)
    assert start([]) == hwmodel.HdkStart(None, None)
    assert start([], prov=True) == hwmodel.HdkStart("PIN-DRV", "PIN-FW")
    assert start(["node2:firmware=7.5.0.1.129"]) == hwmodel.HdkStart("24.1.rc3", "7.5.0.1.129")
    assert start(["node2:hdk=out-of-range"]) == hwmodel.HdkStart("24.1.rc2", "7.3.0.1.231")
    assert start(["node1:firmware=7.5.0.1.129"]) == hwmodel.HdkStart(None, None)
    assert start(["node2:driver-half-installed"]) == hwmodel.HdkStart("PIN-DRV", None, True)


def test_npu_smi_table_parses_back_with_16_npus(tmp_path):
    node = Node(tmp_path, model())
    info = npu_smi.parse_npu_smi_info(node.run("npu-smi", "info").stdout)
    assert info.npu_ids == list(range(16))
    assert {c.name for c in info.chips} == {"910B3"}
    assert all(c.health == "OK" and c.hbm_total_mb == 65536 for c in info.chips)
    assert info.chips[0].bus_id == "0000:C1:00.0" and info.chips[7].bus_id == "0000:42:00.0"


def test_npu_smi_absent_driver_is_an_error(tmp_path):
    node = Node(tmp_path, model(), driver_loaded=False)
    result = node.run("npu-smi", "info", ok=False)
    assert result.returncode != 0 and "dcmi module initialize failed" in result.stdout


def test_each_npu_fault_is_visible(tmp_path):
    faults = ["node1.npu3:health=Warning", "node1.npu5:missing", "node1.npu2:temp=97", "node1.npu0:link=DOWN",
              "node1.npu1:net_health=Fault", "node1.npu4:no-ip", "node1.npu6:hbm-used=40000",
              "node1.npu7:health=Alarm"]
    node = Node(tmp_path, model(faults=faults))
    info = npu_smi.parse_npu_smi_info(node.run("npu-smi", "info").stdout)
    by_id = {c.npu_id: c for c in info.chips}
    assert 5 not in by_id and len(by_id) == 15
    assert by_id[3].health == "Warning" and by_id[7].health == "Alarm"
    assert by_id[2].temp_c == 97
    assert by_id[6].hbm_used_mb == 40000
    assert node.run("npu-smi", "info", "-t", "board", "-i", "5", ok=False).returncode == 1
    assert hccn_tool.parse_hccn_link(node.run("hccn_tool", "-i", "0", "-link", "-g").stdout) == "DOWN"
    assert hccn_tool.parse_hccn_link(node.run("hccn_tool", "-i", "1", "-link", "-g").stdout) == "UP"
    assert hccn_tool.parse_hccn_net_health(node.run("hccn_tool", "-i", "1", "-net_health", "-g").stdout) == "Fault"
    no_ip = node.run("hccn_tool", "-i", "4", "-ip", "-g", ok=False)
    assert not hccn_tool.parse_hccn_ip(no_ip.stdout).configured
    assert hccn_tool.parse_hccn_ip(node.run("hccn_tool", "-i", "0", "-ip", "-g").stdout).address == "10.88.1.11"
    assert node.run("lspci", "-n", "-d", "19e5:d802").stdout.count("19e5:d802") == 15


def test_board_compatibility_follows_the_driver_range(tmp_path):
    hw = model()
    node = Node(tmp_path, hw)
    board = npu_smi_board.parse_npu_smi_board(node.run("npu-smi", "info", "-t", "board", "-i", "0").stdout)
    assert (board.firmware_version, board.compatibility) == ("7.1.0.7.220", "OK")
    hw = node.hw()
    hw["firmware"]["active"] = "7.8.0.6.236"
    (node.hw_dir / "hw.json").write_text(json.dumps(hw))
    board = npu_smi_board.parse_npu_smi_board(node.run("npu-smi", "info", "-t", "board", "-i", "0").stdout)
    assert board.compatibility == "NOK"


def test_hccn_tool_set_ip_persists_to_hccn_conf(tmp_path):
    node = Node(tmp_path, model(faults=["node1.npu4:no-ip"]))
    node.run("hccn_tool", "-i", "4", "-ip", "-s", "address", "10.99.0.5", "netmask", "255.255.255.0")
    assert hccn_tool.parse_hccn_ip(node.run("hccn_tool", "-i", "4", "-ip", "-g").stdout).address == "10.99.0.5"
    assert "address_4=10.99.0.5" in (tmp_path / "hccn.conf").read_text()


def test_hccn_tool_tls_reads_the_knob_and_sets_the_switch(tmp_path):
    node = Node(tmp_path, model(faults=["node1:tls=on"]))
    assert hccn_tool.parse_hccn_tls(node.run("hccn_tool", "-i", "2", "-tls", "-g").stdout) is True
    node.run("hccn_tool", "-i", "2", "-tls", "-s", "enable", "0")
    assert hccn_tool.parse_hccn_tls(node.run("hccn_tool", "-i", "2", "-tls", "-g").stdout) is False
    assert hccn_tool.parse_hccn_tls(node.run("hccn_tool", "-i", "3", "-tls", "-g").stdout) is True
    bad = node.run("hccn_tool", "-i", "2", "-tls", "-s", "enable", "yes", ok=False)
    assert bad.returncode != 0
    (tmp_path / "off").mkdir()
    off = Node(tmp_path / "off", model())
    assert hccn_tool.parse_hccn_tls(off.run("hccn_tool", "-i", "0", "-tls", "-g").stdout) is False


def test_sim_reboot_activates_pending_firmware_and_changes_boot_id(tmp_path):
    hw = model()
    hw["firmware"]["pending"] = "7.7.0.1.231"
    node = Node(tmp_path, hw)
    before = node.hw()["boot_id"]
    node.run("sim-reboot")
    after = node.hw()
    assert after["firmware"] == {"active": "7.7.0.1.231", "pending": None}
    assert after["boot_id"] != before and after["boots"] == 1
    assert (node.hw_dir / "boot_id").read_text().strip() == after["boot_id"]


def marker(node, **values):
    load = node.hw_dir / "load"
    load.mkdir(exist_ok=True)
    (load / "job.json").write_text(json.dumps(values))


def table(node):
    return {c.npu_id: c for c in npu_smi.parse_npu_smi_info(node.run("npu-smi", "info").stdout).chips}


def test_npu_smi_follows_the_load_and_a_pinned_temperature_stays(tmp_path):
    import time

    node = Node(tmp_path, model(npus=4, faults=["node1.npu3:temp=97"]))
    idle = table(node)
    assert [c.aicore_pct for c in idle.values()] == [0, 0, 0, 0] and idle[3].temp_c == 97
    now = time.time()
    marker(node, since=now - 60, until=now + 60, aicore_pct=85, hbm_fraction=0.85)
    busy = table(node)
    assert all(70 <= c.aicore_pct <= 95 for c in busy.values())
    assert busy[0].temp_c >= idle[0].temp_c + 20 and busy[0].power_w > idle[0].power_w + 150
    assert busy[0].hbm_used_mb == int(65536 * 0.85) and busy[3].temp_c == 97   # the knob pins it
    usages = node.run("npu-smi", "info", "-t", "usages", "-i", "1").stdout
    assert "Aicore Usage Rate(%)" in usages and ": 0\n" not in usages.split("Aicore Usage Rate(%)")[1][:40]
    marker(node, since=now - 120, until=now - 15, aicore_pct=85)   # ended 15 s ago: idle, cooling down
    cooling = table(node)
    assert cooling[0].aicore_pct == 0 and idle[0].temp_c < cooling[0].temp_c < busy[0].temp_c
    marker(node, since=now - 900, until=now - 600, aicore_pct=85)
    assert table(node)[0].temp_c == idle[0].temp_c
    (node.hw_dir / "load" / "job.json").write_text('{"since": ')   # being written: ignored
    assert table(node)[0].aicore_pct == 0


def test_npu_smi_common_prints_the_frequency_reduced_when_a_loaded_npu_is_too_hot(tmp_path):
    import time

    from dapo_ops.ascend.npu_smi_common import parse_npu_smi_common

    node = Node(tmp_path, model(npus=4, faults=["node1.npu3:temp=110"]))

    def common(npu):
        return parse_npu_smi_common(node.run("npu-smi", "info", "-t", "common", "-i", str(npu)).stdout)

    assert [(common(k).current_mhz, common(k).rated_mhz) for k in (0, 3)] == [(800, 1800), (800, 1800)]
    now = time.time()
    marker(node, since=now - 30, until=now + 60, aicore_pct=85)
    assert common(0).current_mhz == 1800 and common(0).aicore_pct > 0
    assert common(3).current_mhz == 1300 and common(3).temp_c == 110


def test_the_dispatcher_serves_a_moving_table_for_5_s_at_most_and_an_idle_one_until_the_load_changes(tmp_path):
    import time

    node = Node(tmp_path, model(npus=2))
    tool = tmp_path / "bin" / "npu-smi"
    tool.parent.mkdir()
    (node.hw_dir / "ascend_emu.py").write_text(EMU.read_text())
    (node.hw_dir / "run").write_text((ASSETS / "run.sh").read_text())
    (node.hw_dir / "run").chmod(0o755)
    tool.symlink_to(node.hw_dir / "run")

    def aicore():
        result = subprocess.run([str(tool), "info"], capture_output=True, text=True, env=node.env, timeout=30)
        assert result.returncode == 0, result.stdout + result.stderr
        return [c.aicore_pct for c in npu_smi.parse_npu_smi_info(result.stdout).chips]

    cache = node.hw_dir / "cache" / "npu-smi_info"
    now = time.time()
    for model_file in (node.hw_dir / "hw.json", node.ascend / "driver" / "version.info"):   # an hour old
        os.utime(model_file, (now - 3600, now - 3600))
    assert aicore() == [0, 0] and cache.is_file()
    marker(node, since=now - 5, until=now + 60, aicore_pct=85)
    assert aicore() == [0, 0]                             # while the load moves, an answer is good for 5 s
    os.utime(cache, (now - 6, now - 6))
    assert all(aicore())                                  # then the table is read again
    marker(node, since=now - 300, until=now - 100, aicore_pct=85)   # the job's last step ended 100 s ago
    os.utime(cache, (now - 6, now - 6))
    assert aicore() == [0, 0]                             # read again: the load is over
    os.utime(node.hw_dir / "load" / "job.json", (now - 180, now - 180))   # marked 3 minutes ago, cache 1 minute
    os.utime(cache, (now - 60, now - 60))
    assert aicore() == [0, 0] and cache.stat().st_mtime == now - 60     # served as it is: nothing moves now
    marker(node, since=now, until=now + 60, aicore_pct=85)             # a new job starts
    assert all(aicore())                                  # older than 5 s: read again
