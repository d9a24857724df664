"""`ansible-playbook site.yml` on a 2-node simulated fleet: the whole pinned stack, idempotent, ordered upgrades."""

import json

import pytest

from dapo_ops.ascend import parsers as p
from dapo_ops.manifest import load_manifest
from dapo_ops.sim.fleet import FleetSpec
from dapo_ops.stackcheck import pinned_python_packages

from .ansible_helpers import playbook
from .helpers import hosts, sh


def boots(host):
    return json.loads(sh(host, "cat /dev/.dapo-sim/hw.json").stdout)["boots"]


@pytest.fixture(scope="module")
def provisioned(sim):
    """node1 fresh; node2 starts on firmware 7.5.0.1.129 (and its driver 24.1.rc3)."""
    sim.down()
    sim.up(FleetSpec(nodes=2, faults=("node2:firmware=7.5.0.1.129",)))
    nodes = hosts()
    boots_before = {name: boots(h) for name, h in nodes.items()}
    rc, output, recap = playbook()
    assert rc == 0, output[-3000:]
    return nodes, boots_before, recap


def test_full_run_installs_the_pinned_stack_on_both_nodes(provisioned):
    nodes, _, recap = provisioned
    manifest = load_manifest()
    assert all(r["failed"] == 0 and r["unreachable"] == 0 and r["changed"] > 0 for r in recap.values())
    for host in nodes.values():
        driver = p.parse_version_info(sh(host, "cat /usr/local/Ascend/driver/version.info").stdout)
        firmware = p.parse_version_info(sh(host, "cat /usr/local/Ascend/firmware/version.info").stdout)
        assert (driver["Version"], firmware["Version"]) == (manifest.artifact("driver").version,
                                                            manifest.artifact("firmware").version)
        info = p.parse_npu_smi_info(sh(host, "npu-smi info").stdout)
        assert info.driver_version == manifest.artifact("driver").version and len(info.chips) == 16
        board = p.parse_npu_smi_board(sh(host, "npu-smi info -t board -i 15").stdout)
        assert (board.firmware_version, board.compatibility) == (manifest.artifact("firmware").version, "OK")
        toolkit = p.parse_toolkit_install_info(sh(host, f"cat /usr/local/Ascend/{manifest.artifact('cann_toolkit').version_file}").stdout)
        assert toolkit["version"] == manifest.artifact("cann_toolkit").version
        pip_list = sh(host, "/opt/miniconda3/envs/dapo/bin/pip list --format json").stdout
        installed = {d["name"].replace("-", "_").lower(): d for d in json.loads(pip_list)}
        for dist, version in pinned_python_packages(manifest).items():
            assert installed[dist]["version"] == version, dist
        vllm_dir = f"/opt/dapo-ops/src/{manifest.source('vllm').dir}"
        ascend_dir = f"/opt/dapo-ops/src/{manifest.source('vllm_ascend').dir}"
        assert installed["vllm"]["editable_project_location"] == vllm_dir
        assert installed["vllm_ascend"]["editable_project_location"] == ascend_dir
        assert not ascend_dir.startswith(vllm_dir + "/") and not vllm_dir.startswith(ascend_dir + "/")
        fact = json.loads(sh(host, "cat /etc/ansible/facts.d/dapo_ops.fact").stdout)
        assert fact["manifest"] == manifest.name and fact["import_errors"] == {}
        assert fact["packages"]["torch_npu"] == manifest.pinned_version("torch_npu")
        env = sh(host, "bash -c 'source /usr/local/Ascend/dapo-ops-env.sh && echo $ATB_CXX_ABI'").stdout.strip()
        assert env == "1"


def test_old_firmware_node_upgrades_firmware_then_driver_with_one_reboot(provisioned):
    nodes, boots_before, _ = provisioned
    log = sh(nodes["node2"], "cat /var/log/ascend_seclog/operation.log").stdout.splitlines()
    upgrades = [line.split()[2:5] for line in log if "--upgrade" in line]
    assert [u[0] for u in upgrades] == ["firmware", "driver"], log
    assert boots(nodes["node2"]) - boots_before["node2"] == 1
    fresh = [line.split()[2:5] for line in sh(nodes["node1"], "cat /var/log/ascend_seclog/operation.log").stdout.splitlines()]
    hdk = [(f[0], f[2]) for f in fresh if f[0] in ("driver", "firmware")]
    assert hdk == [("driver", "--full"), ("firmware", "--full")]
    assert boots(nodes["node1"]) - boots_before["node1"] == 1


def test_second_run_changes_nothing(provisioned):
    rc, output, recap = playbook()
    assert rc == 0, output[-3000:]
    assert {h: r["changed"] for h, r in recap.items()} == {"node1": 0, "node2": 0}, output[-3000:]


def test_one_layer_by_tag(provisioned):
    rc, output, recap = playbook("--tags", "cann")
    assert rc == 0 and all(r["changed"] == 0 for r in recap.values()), output[-2000:]
    tasks = [line for line in output.splitlines() if line.startswith("TASK [") and "Validating arguments" not in line]
    roles = {line[len("TASK ["):].split(" :")[0] for line in tasks if " : " in line}
    assert roles == {"stack", "ascend_cann"}, roles


def test_validate_takes_the_recipe_from_the_head_nodes_checkout(provisioned):
    import subprocess
    import sys

    from dapo_ops.paths import PROJECT_ROOT

    result = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "validate", "jobs/qwen3-30b-a3b-dapo.yaml",
                             "--recipe-from-head"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
