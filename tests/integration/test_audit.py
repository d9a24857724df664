"""`dapo-ops audit` against the simulated fleet: clean, every fault knob, an unreachable node, bundles, JSON."""

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from dapo_ops.layout import node_layout
from dapo_ops.manifest import load_manifest
from dapo_sim.fleet import FleetSpec

from .helpers import hosts, sh, sigint_as_at_a_terminal, standin_stack_env

SCHEMA = json.loads((Path(__file__).parents[2] / "dapo_ops" / "audit" / "schema.json").read_text())


def audit(*args, timeout=300):
    result = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "audit", *args], capture_output=True, text=True,
                            timeout=timeout)
    return result


def provision_python_fact(nodes):
    """The Python stack and the CANN environment script, and the record the verify role writes after a full
    site.yml run (the HDK and CANN are preinstalled by the sim): the env's versions, imports clean."""
    standin_stack_env(nodes)
    query = ("import importlib.metadata as m, json, sys\n"
             "def v(n):\n    try: return m.version(n)\n    except m.PackageNotFoundError: return None\n"
             "names = ('numpy', 'torch', 'torch_npu', 'vllm', 'vllm_ascend', 'verl', 'ray', 'protobuf')\n"
             "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'import_errors': {},"
             " 'torch_cxx11_abi': True, 'atb_cxx_abi': '1', 'packages': {n: v(n) for n in names}}))")
    for host in nodes.values():
        python = node_layout(host.vars).python
        sh(host, f"mkdir -p /etc/ansible/facts.d && {python} -c {shlex.quote(query)} > /etc/ansible/facts.d/dapo_ops.fact")


@pytest.fixture(scope="module")
def clean_fleet(sim):
    sim.down()
    sim.up(FleetSpec(nodes=2, npus_per_node=8, provisioned=True))
    nodes = hosts()
    provision_python_fact(nodes)
    return nodes


def test_clean_fleet_exits_0_and_the_json_validates(clean_fleet, tmp_path):
    result = audit("--json", "--npus-per-node", "8", "--prometheus", str(tmp_path / "dapo.prom"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["summary"] == {"hosts": 2, "reachable": 2, "errors": 0, "warnings": 0, "clean": True}
    assert len(report["hosts"]["node1"]["npus"]) == 8
    assert 'dapo_audit_host_up{host="node1"} 1' in (tmp_path / "dapo.prom").read_text()
    human = audit("--npus-per-node", "8")
    assert human.returncode == 0 and "0 error(s)" in human.stdout


def test_limit_and_bad_usage(clean_fleet):
    only = audit("--json", "--npus-per-node", "8", "--limit", "node2")
    assert only.returncode == 0 and list(json.loads(only.stdout)["hosts"]) == ["node2"]
    for args, needle in ((["--limit", "node9"], "matches no host"), (["-i", "/nonexistent"], "does not exist"),
                         (["--from-bundle", "/tmp", "-i", "inventory/sim"], "takes neither"),
                         (["--timeout", "0"], "must be a positive number")):
        bad = audit(*args)
        assert bad.returncode == 2 and needle in bad.stderr and "Traceback" not in bad.stderr


def test_inventory_values_are_data_and_host_names_never_leave_the_bundle(clean_fleet, tmp_path):
    """Issue 15 (3): a stack_* value that is a Jinja payload is refused, not run, on the controller; a host named
    like a path is refused before the bundle directory is written."""
    import shutil

    marker = tmp_path / "pwned"
    inventory = tmp_path / "inventory"
    shutil.copytree(Path(__file__).parents[2] / "inventory" / "sim", inventory)
    hosts_yml = inventory / "hosts.yml"
    text = hosts_yml.read_text()
    payload = "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}"
    hosts_yml.write_text(text.replace("        node2:\n", f"        node2:\n          stack_env_prefix: \"{payload}\"\n", 1))
    result = audit("-i", str(inventory), "--npus-per-node", "8")
    assert result.returncode == 2 and "host 'node2': stack_env_prefix: " in result.stderr, result.stderr
    assert not marker.exists()
    hosts_yml.write_text(text.replace("        node2:\n", "        ../../escaped:\n          ansible_host: 10.77.0.12\n"
                                      "        node2:\n", 1))
    bundle = tmp_path / "deep" / "bundle"
    result = audit("-i", str(inventory), "--npus-per-node", "8", "--bundle-out", str(bundle))
    assert result.returncode == 2 and "host '../../escaped': the host name is not a plain name" in result.stderr
    assert not (tmp_path / "escaped").exists() and not bundle.exists()


FAULTS = ("node1.npu3:health=Warning", "node1.npu5:missing", "node1.npu0:link=DOWN", "node1.npu2:temp=97",
          "node2:firmware=7.5.0.1.129", "node3:hdk=out-of-range")


@pytest.fixture(scope="module")
def faulty_fleet(sim, tmp_path_factory):
    sim.down()
    sim.up(FleetSpec(nodes=3, npus_per_node=8, provisioned=True, faults=FAULTS))
    nodes = hosts()
    provision_python_fact(nodes)
    bundle = tmp_path_factory.mktemp("audit") / "bundle"
    result = audit("--json", "--bundle-out", str(bundle))
    return nodes, result, bundle


def findings(report, host):
    return {(f["code"], f["npu"]) for f in report["findings"] if f["host"] == host}


def test_each_fault_is_found_on_its_host_and_npu(faulty_fleet):
    _, result, _ = faulty_fleet
    assert result.returncode == 1
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    node1 = findings(report, "node1")
    assert {("npu-unhealthy", 3), ("npu-missing", 5), ("link-down", 0), ("npu-hot", 2)} <= node1
    assert {c for c, _ in node1} == {"npu-unhealthy", "npu-missing", "link-down", "npu-hot"}
    node2 = findings(report, "node2")
    assert {("firmware-off-pin", None), ("driver-off-pin", None)} <= node2
    assert {("npu-firmware-off-pin", n) for n in range(8)} <= node2
    node3 = findings(report, "node3")
    assert ("incompatible", None) in node3 and {("npu-incompatible", n) for n in range(8)} <= node3
    hot = next(f for f in report["findings"] if f["code"] == "npu-hot")
    assert hot["severity"] == "warning" and hot["actual"] == "97"
    # F1 and F7 as the user reads them
    message = {(f["host"], f["code"], f["npu"]): f["message"] for f in report["findings"]}
    pinned = load_manifest().artifact("firmware").version
    assert message[("node2", "firmware-off-pin", None)] == f"firmware is 7.5.0.1.129, the stack pins {pinned}"
    assert "is outside the driver" in message[("node3", "incompatible", None)]
    assert message[("node1", "npu-unhealthy", 3)].endswith("health is Warning")
    human = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "audit"], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "COLUMNS": "250"})  # a wide terminal: no wrapped cells
    assert human.returncode == 1 and "firmware is 7.5.0.1.129, the stack pins" in human.stdout, human.stdout


def test_bundle_round_trip_gives_the_same_findings(faulty_fleet, tmp_path):
    _, result, bundle = faulty_fleet
    offline = audit("--json", "--from-bundle", str(bundle))
    assert offline.returncode == 1
    assert json.loads(offline.stdout)["findings"] == json.loads(result.stdout)["findings"]
    (bundle / "node2" / "firmware_version.txt").write_text("garbage without an equals sign\n")
    broken = json.loads(audit("--json", "--from-bundle", str(bundle)).stdout)
    failed = [f for f in broken["findings"] if f["code"] == "collect-failed"]
    assert len(failed) == 1 and "node2/firmware_version.txt" in failed[0]["message"]


def test_ctrl_c_prints_what_was_collected(faulty_fleet, sim):
    """node3's sshd is frozen (the TCP connection opens, no banner comes): Ctrl-C reports node1 and node2."""
    import time

    state = sim.load_state()
    node3 = next(n for n in state.nodes if n.name == "node3")
    os.kill(node3.pid1, signal.SIGSTOP)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "audit", "--json", "--connect-timeout", "60"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=sigint_as_at_a_terminal)
        time.sleep(6)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        os.kill(node3.pid1, signal.SIGCONT)
    assert proc.returncode == 1, stderr
    report = json.loads(stdout)
    assert report["interrupted"] is True
    assert report["hosts"]["node1"]["reachable"] and report["hosts"]["node2"]["reachable"]
    assert report["hosts"]["node3"]["error"] == "not collected (interrupted)"
    assert "interrupted" in stderr


def test_an_unreachable_node_is_a_finding_and_the_others_are_audited(faulty_fleet, sim):
    state = sim.load_state()
    node3 = next(n for n in state.nodes if n.name == "node3")
    os.kill(node3.pid1, signal.SIGKILL)  # its sshd (PID 1): the node stops answering
    result = audit("--json", "--connect-timeout", "3")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert findings(report, "node3") == {("unreachable", None)}
    assert report["hosts"]["node3"]["reachable"] is False
    assert report["hosts"]["node1"]["reachable"] and ("npu-missing", 5) in findings(report, "node1")
    sim.down()
