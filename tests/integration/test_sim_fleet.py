"""A 2-node fleet: strict-host-key SSH through Fabric, separate nodes, npu-smi arriving with the driver."""

import subprocess
import sys
from pathlib import Path

import pytest

from dapo_ops.ascend.npu_smi import parse_npu_smi_info
from dapo_ops.ascend.version_files import parse_version_info
from dapo_ops.errors import SSHError
from dapo_ops.fleet.ssh import HostSpec, connect
from dapo_ops.manifest import load_manifest
from dapo_ops.stack.artifacts import read_digest_file
from dapo_ops.paths import PROJECT_ROOT
from dapo_sim.fleet import FleetSpec

from .helpers import hosts, sh


@pytest.fixture(scope="module")
def fleet(sim):
    sim.down()  # a fresh fleet: nothing installed yet
    sim.up(FleetSpec(nodes=2))
    return hosts()


def test_every_node_answers_over_verified_ssh(fleet):
    assert sorted(fleet) == ["node1", "node2"]
    for name, host in fleet.items():
        assert sh(host, "hostname").stdout.strip() == name
        assert host.known_hosts.exists()


def test_nodes_have_their_own_addresses_pids_and_tmp(fleet):
    node1, node2 = fleet["node1"], fleet["node2"]
    assert node1.address != node2.address
    sh(node1, "echo node1-was-here > /tmp/marker")
    assert sh(node2, "cat /tmp/marker 2>/dev/null || echo absent").stdout.strip() == "absent"
    assert sh(node1, "cat /proc/1/comm").stdout.strip() == "sshd"  # own PID namespace: sshd is PID 1
    assert sh(node1, "ls /dev/davinci[0-9]* | wc -l").stdout.strip() == "16"


def test_wrong_host_key_is_refused(fleet, tmp_path):
    node1, node2 = fleet["node1"], fleet["node2"]
    lines = node1.known_hosts.read_text().splitlines()
    node2_key = next(line for line in lines if line.startswith(node2.address + " ")).split(" ", 1)[1]
    forged = [f"{node1.address} {node2_key}" if line.startswith(node1.address + " ") else line for line in lines]
    (tmp_path / "forged").write_text("\n".join(forged) + "\n")
    with pytest.raises(SSHError, match="host key does not match"):
        connect(HostSpec("node1", node1.address, tmp_path / "forged", key_file=node1.key_file))
    (tmp_path / "empty").write_text("")
    with pytest.raises(SSHError, match="host key not in"):
        connect(HostSpec("node1", node1.address, tmp_path / "empty", key_file=node1.key_file))


def test_npu_smi_arrives_with_the_driver_installer(fleet):
    manifest = load_manifest()
    driver = manifest.artifact("driver")
    node1, node2 = fleet["node1"], fleet["node2"]
    assert sh(node1, "command -v npu-smi", ok=False).exit_code != 0
    url = f"{node1.vars['dapo_artifact_url']}/{driver.file}"
    sh(node1, f"curl -fsS -o /tmp/driver.run {url} && sha256sum /tmp/driver.run")
    digest = sh(node1, "sha256sum /tmp/driver.run").stdout.split()[0]
    recorded = read_digest_file(node1.vars["dapo_artifact_digest_file"])   # the simulated inventory's file
    assert digest == recorded[driver.file]
    install = sh(node1, "bash /tmp/driver.run --full --install-for-all --quiet --nox11")
    assert "takes effect immediately" in install.stdout
    info = parse_npu_smi_info(sh(node1, "npu-smi info").stdout)
    assert info.driver_version == driver.version
    assert len(info.chips) == 16
    version = parse_version_info(sh(node1, "cat /usr/local/Ascend/driver/version.info").stdout)
    assert version["Version"] == driver.version
    # node2 has its own /usr/local/Ascend: still nothing installed there
    assert sh(node2, "ls /usr/local/Ascend 2>&1 || true").stdout.strip().endswith("No such file or directory")
    assert sh(node2, "command -v npu-smi", ok=False).exit_code != 0


def test_real_ansible_reaches_the_nodes_with_host_key_checking(fleet):
    ansible = Path(sys.executable).with_name("ansible")
    result = subprocess.run([str(ansible), "npu_nodes", "-m", "ansible.builtin.ping"], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == 2 and "UNREACHABLE" not in result.stdout


def test_a_node_cannot_read_the_simulators_state_dir(sim, fleet):
    """The controller's SSH key, the fleet state and the other nodes' disks live in the simulator's state dir, which
    a node sees empty, whether it is under /var/lib (the nodes' overlay) or anywhere else on the host."""
    state = sim.load_state()
    node2_disk = Path(state.nodes[1].dir)
    secrets = [sim.key_file, sim.state_file, node2_disk / "hw" / "hw.json",
               node2_disk / "upper" / "etc" / "ssh" / "dapo_host_ed25519_key"]
    assert all(path.exists() for path in secrets)  # on the host
    node1 = fleet["node1"]
    for path in secrets:
        assert sh(node1, f"cat {path}", ok=False).exit_code != 0, path
    assert sh(node1, f"ls -A {sim.state_dir}").stdout == ""
    assert sh(node1, "cat /dev/.dapo-sim/hw.json").stdout.startswith("{")  # its own hardware model is still there
