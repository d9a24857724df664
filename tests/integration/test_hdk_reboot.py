"""The HDK reboot decision follows the installer's own word (exit 2 / its "Reboot needed" line), not only npu-smi,
and the emulated installers say "reboot" and exit 2 where the real ones do (docs/ascend-formats.md §2.3; ascend-deployer
`library/process_npu.py` takes exit codes 0 and 2 as success, then asks for a reboot)."""

import json
import shlex

import pytest

from dapo_ops.ascend import npu_smi
from dapo_ops.manifest import load_manifest
from dapo_sim.fleet import FleetSpec

from .ansible_helpers import playbook
from .helpers import hosts, sh


def boots(host):
    return json.loads(sh(host, "cat /dev/.dapo-sim/hw.json").stdout)["boots"]


@pytest.fixture(scope="module")
def fleet(sim):
    """Both nodes on the pinned HDK; node1's driver is half-installed (upgrade-tool gone) but loaded."""
    sim.down()
    sim.up(FleetSpec(nodes=2, provisioned=True, faults=("node1:driver-half-installed",)))
    return sim, hosts()


def test_reinstall_over_the_loaded_driver_reboots_because_the_installer_said_so(fleet):
    _, nodes = fleet
    pinned = load_manifest().artifact("driver").version
    # npu-smi shows no difference: the loaded driver is the installed (pinned) one
    assert npu_smi.parse_npu_smi_info(sh(nodes["node1"], "npu-smi info").stdout).driver_version == pinned
    before = {name: boots(h) for name, h in nodes.items()}

    rc, output, _ = playbook("--check", "--tags", "hdk", site=True)
    assert rc == 0, output[-3000:]
    flat = " ".join(output.split())
    assert "would reboot node1: driver --full --install-for-all --force: would ask for a reboot" in flat
    assert "would reboot node2" not in flat
    assert "reboot plan: node1 (1 node(s), at most 1 at a time, in this order)" in flat   # issue 28 (7)

    rc, output, _ = playbook("--tags", "preflight,hdk")
    assert rc == 0, output[-3000:]
    flat = " ".join(output.split())
    assert flat.index("reboot plan: node1 (1 node(s)") < flat.index("rebooted node1")
    assert ("rebooted node1: driver --full --install-for-all --force: exit 2, Driver package installed "
            "successfully! Reboot needed for installation/upgrade to take effect!") in flat, \
        [line for line in output.splitlines() if "reboot" in line]
    assert boots(nodes["node1"]) - before["node1"] == 1
    assert boots(nodes["node2"]) == before["node2"]  # nothing installed there, nothing asked for
    sh(nodes["node1"], "test -x /usr/local/Ascend/driver/tools/upgrade-tool")

    rc, output, recap = playbook("--tags", "hdk")  # nothing asked for, nothing differs: no second reboot
    assert rc == 0 and recap["node1"]["changed"] == 0, output[-3000:]
    assert boots(nodes["node1"]) - before["node1"] == 1


def test_installers_ask_for_a_reboot_where_the_real_ones_do(fleet):
    _, nodes = fleet
    node = nodes["node2"]
    manifest = load_manifest()
    driver_file, firmware_file = manifest.artifact("driver").file, manifest.artifact("firmware").file
    for file in (driver_file, firmware_file):  # fetched as the hdk role does: a node does not see the sim's state dir
        sh(node, f"curl -fsS -o /tmp/{file} {node.vars['dapo_artifact_url']}/{file}")
    driver = f"bash /tmp/{driver_file} --quiet --nox11"
    firmware = f"bash /tmp/{firmware_file} --quiet --nox11"

    def run(command):
        result = sh(node, command, ok=False)
        return result.exit_code, result.stdout

    # a driver upgrade over a loaded driver cannot hot-reset (docs/ascend-formats.md §2.3)
    rc, out = run(driver + " --upgrade")
    assert rc == 2 and "[WARNING]Kernel modules can not be removed, reboot needed..." in out
    assert "[INFO]Driver package installed successfully! Reboot needed for installation/upgrade to take effect!" in out
    # firmware: always at the next reboot
    rc, out = run(firmware + " --upgrade")
    assert rc == 2 and ("Firmware package installed successfully! Reboot now or after driver installation for the "
                        "installation/upgrade to take effect.") in out
    # uninstalling a loaded driver leaves its modules in the kernel until a reboot
    rc, out = run(driver + " --uninstall")
    assert rc == 2 and "Reboot needed for uninstallation to take effect!" in out
    sh(node, "/usr/local/sbin/sim-reboot")
    # nothing loaded: the first install hot-resets the NPUs and needs no reboot
    rc, out = run(driver + " --full --install-for-all")
    assert rc == 0 and "The new version takes effect immediately." in out and "eboot" not in out


def test_a_newer_firmware_is_not_taken_back_unless_the_inventory_names_it(fleet, tmp_path):
    """issue 28 (7): node2 reports a firmware newer than the pin; site.yml stops before it installs anything there."""
    _, nodes = fleet
    node = nodes["node2"]
    info = "/usr/local/Ascend/firmware/version.info"
    saved = sh(node, f"cat {info}").stdout
    pinned = load_manifest().artifact("firmware").version
    sh(node, f"sed -i 's/{pinned.replace('.', '[.]')}/7.99.0.1.1/' {info}")
    try:
        rc, output, recap = playbook("--tags", "hdk", "--limit", "node2")
        flat = " ".join(output.split())
        assert rc != 0 and recap["node2"]["failed"] == 1 and recap["node2"]["changed"] == 0, output[-3000:]
        assert (f"node2: the installed firmware 7.99.0.1.1 is newer than the pinned {pinned}: site.yml does not go "
                "back unless dapo_hdk_downgrade lists firmware") in flat
        assert "7.99.0.1.1" in sh(node, f"cat {info}").stdout   # nothing was installed over it
    finally:
        sh(node, f"printf '%s' {shlex.quote(saved)} > {info}")
