"""Every fault knob, seen through the emulated tools over SSH and read back by the real parsers."""

import pytest

from dapo_ops.ascend import hccn_tool, npu_smi, npu_smi_board, version_files
from dapo_ops.ascend.compat import check_compatibility
from dapo_ops.manifest import load_manifest
from dapo_sim.fleet import FleetSpec

from .ansible_helpers import playbook
from .helpers import hosts, sh

FAULTS = (
    "node1.npu3:health=Warning", "node1.npu7:health=Critical", "node1.npu5:missing", "node1.npu2:temp=97",
    "node1.npu0:link=DOWN", "node1.npu1:net_health=Fault", "node1.npu4:no-ip", "node1.npu6:hbm-used=40000",
    "node1:installer=dkms-fail", "node2:firmware=7.5.0.1.129", "node3:hdk=out-of-range",
    "node3:driver-half-installed", "node3:host-mem-gib=64",
)


@pytest.fixture(scope="module")
def fleet(sim):
    sim.down()
    sim.up(FleetSpec(nodes=3, npus_per_node=8, faults=FAULTS, provisioned=True))
    return hosts()


def test_npu_faults_in_npu_smi(fleet):
    info = npu_smi.parse_npu_smi_info(sh(fleet["node1"], "npu-smi info").stdout)
    chips = {c.npu_id: c for c in info.chips}
    assert sorted(chips) == [0, 1, 2, 3, 4, 6, 7]  # npu5 missing
    assert chips[3].health == "Warning" and chips[7].health == "Critical"
    assert chips[2].temp_c == 97
    assert chips[6].hbm_used_mb == 40000
    assert sh(fleet["node1"], "ls /dev/davinci5", ok=False).exit_code != 0
    assert sh(fleet["node1"], "lspci -d 19e5:d802 | wc -l").stdout.strip() == "7"
    clean = npu_smi.parse_npu_smi_info(sh(fleet["node2"], "npu-smi info").stdout)
    assert len(clean.chips) == 8 and {c.health for c in clean.chips} == {"OK"}


def test_nic_faults_in_hccn_tool(fleet):
    node1 = fleet["node1"]
    hccn = "/usr/local/Ascend/driver/tools/hccn_tool"
    assert hccn_tool.parse_hccn_link(sh(node1, f"{hccn} -i 0 -link -g").stdout) == "DOWN"
    assert hccn_tool.parse_hccn_net_health(sh(node1, f"{hccn} -i 1 -net_health -g").stdout) == "Fault"
    no_ip = sh(node1, f"{hccn} -i 4 -ip -g", ok=False)
    assert no_ip.exit_code != 0 and not hccn_tool.parse_hccn_ip(no_ip.stdout).configured
    assert hccn_tool.parse_hccn_ip(sh(node1, f"{hccn} -i 3 -ip -g").stdout).configured


def test_old_firmware_node(fleet):
    manifest = load_manifest()
    node2 = fleet["node2"]
    board = npu_smi_board.parse_npu_smi_board(sh(node2, "npu-smi info -t board -i 0").stdout)
    assert board.firmware_version == "7.5.0.1.129"
    assert board.software_version == "24.1.rc3"
    firmware = version_files.parse_version_info(sh(node2, "cat /usr/local/Ascend/firmware/version.info").stdout)
    assert firmware["Version"] == "7.5.0.1.129"
    pinned_driver = manifest.artifact("driver").version_info
    assert not check_compatibility(pinned_driver, firmware).compatible  # the pinned driver needs newer firmware


def test_out_of_range_pair_and_half_installed_driver(fleet):
    node3 = fleet["node3"]
    board = npu_smi_board.parse_npu_smi_board(sh(node3, "npu-smi info -t board -i 0").stdout)
    assert (board.software_version, board.firmware_version, board.compatibility) == ("24.1.rc2", "7.3.0.1.231", "NOK")
    driver = version_files.parse_version_info(sh(node3, "cat /usr/local/Ascend/driver/version.info").stdout)
    firmware = version_files.parse_version_info(sh(node3, "cat /usr/local/Ascend/firmware/version.info").stdout)
    report = check_compatibility(driver, firmware)
    assert [x.rule for x in report.problems] == ["firmware-in-driver-range"]
    assert sh(node3, "test -e /usr/local/Ascend/driver/tools/upgrade-tool", ok=False).exit_code == 1


def test_dkms_failure_fault(fleet):
    manifest = load_manifest()
    node1 = fleet["node1"]
    driver = manifest.artifact("driver")
    sh(node1, f"curl -fsS -o /tmp/driver.run {node1.vars['dapo_artifact_url']}/{driver.file}")
    result = sh(node1, "bash /tmp/driver.run --upgrade --quiet --nox11", ok=False)
    assert result.exit_code == 1
    assert "Dkms install failed" in result.stdout
    # the same installer works on a node without the fault
    node2 = fleet["node2"]
    sh(node2, f"curl -fsS -o /tmp/driver.run {node2.vars['dapo_artifact_url']}/{driver.file}")
    upgrade = sh(node2, "bash /tmp/driver.run --upgrade --quiet --nox11", ok=False)
    assert upgrade.exit_code == 2 and "Reboot needed" in upgrade.stdout


def test_provisioned_nodes_have_cann(fleet):
    manifest = load_manifest()
    toolkit = version_files.parse_toolkit_install_info(sh(
        fleet["node2"], "cat /usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info").stdout)
    assert toolkit["version"] == manifest.artifact("cann_toolkit").version
    nnal = version_files.parse_nnal_version_info(sh(fleet["node2"], "cat /usr/local/Ascend/nnal/atb/latest/version.info").stdout)
    assert nnal["Ascend-cann-atb"] == manifest.artifact("cann_nnal").version


def test_a_node_short_of_host_memory_fails_preflight_and_launch_before_any_change(fleet, tmp_path, runs_dir):
    """Issue 25: node3 reports 64 GiB (the host-mem-gib knob) where dapo-ops reads it; the shipped job needs about
    458 GiB per node on 2 x 8 (dapo_ops/job/memory.py). Preflight fails node3 naming the need and what it has, and
    launch refuses with exit 2 before it locks or writes anything."""
    import json
    import subprocess
    import sys

    import yaml

    from dapo_ops.paths import PROJECT_ROOT

    assert sh(fleet["node3"], "grep MemTotal /proc/meminfo").stdout.split()[1] == str(64 << 20)
    assert sh(fleet["node1"], "grep MemTotal /proc/meminfo").stdout.split()[1] == str(1536 << 20)
    assert int(sh(fleet["node3"], "df -k --output=size /dev/shm | tail -1").stdout) == 32 << 20   # half, as Linux
    rc, output, recap = playbook("--tags", "preflight", "--limit", "node3")
    flat = " ".join(output.split())
    assert rc != 0 and recap["node3"]["failed"] == 1, output[-3000:]
    assert "node3: the job needs about 458 GiB of host memory per node" in flat and "but node3 has 64 GiB" in flat

    job = yaml.safe_load((PROJECT_ROOT / "jobs/qwen3-30b-a3b-dapo.yaml").read_text())
    job["cluster"]["head"] = "node3"
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(job))
    launched = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "launch", str(spec), "--nodes", "2",
                               "--rehearse-only"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert launched.returncode == 2, launched.stdout + launched.stderr
    assert "node3: the job needs about 458 GiB of host memory per node" in launched.stderr, launched.stderr
    assert "but node3 has 64 GiB" in launched.stderr
    for name in ("node1", "node3"):
        assert sh(fleet[name], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1
    assert not any(runs_dir.iterdir()), list(runs_dir.iterdir())       # no run was recorded
    assert json.loads(sh(fleet["node1"], "cat /dev/.dapo-sim/hw.json").stdout)["host_mem_gib"] == 1536
