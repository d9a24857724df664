"""The hccl_network role on the simulated fleet: the RoCE plan is checked before any change, gateways and
netdetect are set (persisted in /etc/hccn.conf), every NPU pings its peer NPU on the other node."""

import json
import subprocess
import sys

import pytest
import yaml

from dapo_sim.fleet import FleetSpec

from .ansible_helpers import playbook
from .helpers import hosts, set_npu, sh

SPEC = FleetSpec(nodes=2, npus_per_node=8, provisioned=True)  # the audit tests' fleet: reused when it is up
HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"


def plan_inventory(path, gateways=True, gateway_suffix=1):
    """The example inventory's plan on node1/node2: 10.20.<n>.11-18/24, gateway 10.20.<n>.1."""
    node_vars = {}
    for n in (1, 2):
        node_vars[f"node{n}"] = {"dapo_device_ips": [f"10.20.{n}.{11 + k}" for k in range(8)]}
        if gateways:
            node_vars[f"node{n}"]["dapo_device_gateway"] = f"10.20.{n}.{gateway_suffix}"
    path.write_text(yaml.safe_dump({"all": {"vars": {"hccl_network_enabled": True,
                                                     "dapo_device_netmask": "255.255.255.0"},
                                            "hosts": node_vars}}))
    return path


def hccn_conf(nodes):
    return {name: sh(host, "cat /etc/hccn.conf").stdout for name, host in nodes.items()}


@pytest.fixture(scope="module")
def fleet(sim):
    sim.up(SPEC)
    if "10.20.1.11" in hccn_conf(hosts())["node1"]:  # a fleet an earlier run of these tests already configured
        sim.down()
        sim.up(SPEC)
    return hosts()


def test_per_node_subnets_without_gateways_are_refused_before_any_change(fleet, tmp_path):
    before = hccn_conf(fleet)
    rc, output, recap = playbook("--tags", "hccl", extra_inventory=plan_inventory(tmp_path / "p.yml", gateways=False))
    assert rc != 0
    assert ("node1: RoCE plan: npu0-7 cannot reach the same NPUs of node2: subnets 10.20.1.0/24 and 10.20.2.0/24 "
            "differ and node1 and node2 set no gateway") in output
    assert "node2: RoCE plan: npu0-7 cannot reach the same NPUs of node1" in output
    assert set(recap) == set(fleet) and all(r["changed"] == 0 for r in recap.values()), recap
    assert hccn_conf(fleet) == before


def test_with_gateways_every_npu_reaches_its_peer_and_a_second_run_changes_nothing(fleet, tmp_path):
    inventory = plan_inventory(tmp_path / "p.yml")
    rc, output, recap = playbook("--tags", "hccl", extra_inventory=inventory)
    assert rc == 0, output[-3000:]
    assert set(recap) == set(fleet) and all(r["changed"] > 0 and r["failed"] == 0 for r in recap.values()), recap
    assert "8 NPUs reach their peers on node2" in output and "8 NPUs reach their peers on node1" in output
    conf = hccn_conf(fleet)
    for n in (1, 2):
        lines = conf[f"node{n}"].splitlines()
        assert lines[lines.index(f"address_3=10.20.{n}.14"):][:4] == [
            f"address_3=10.20.{n}.14", "netmask_3=255.255.255.0", f"netdetect_3=10.20.{n}.1", f"gateway_3=10.20.{n}.1"]
    ping = sh(fleet["node1"], f"{HCCN} -i 5 -ping -g address 10.20.2.16").stdout
    assert "3 packets transmitted, 3 received, 0.00% packet loss" in ping

    rc, output, recap = playbook("--tags", "hccl", extra_inventory=inventory)
    assert rc == 0 and set(recap) == set(fleet) and all(r["changed"] == 0 for r in recap.values()), recap

    # check mode reports a changed gateway without setting it
    rc, output, recap = playbook("--tags", "hccl", "--check",
                                 extra_inventory=plan_inventory(tmp_path / "c.yml", gateway_suffix=254))
    assert rc == 0 and set(recap) == set(fleet) and all(r["changed"] > 0 for r in recap.values()), recap
    assert "changed: [node1] => (item=-i 7 -gateway -s gateway 10.20.1.254)" in output
    assert hccn_conf(fleet) == conf


def test_a_down_link_a_faulty_nic_and_a_missing_address_are_named_by_the_audit_and_the_role(fleet, tmp_path):
    """F8 on a configured fleet: node2's npu4 link goes DOWN, npu6 reports net health Fault, npu5 loses its
    device IP. The audit names all three; site.yml's hccl layer puts the address back and fails on the other two,
    naming the host and NPUs, and node1 fails the ping to node2's npu4."""
    node2 = fleet["node2"]
    set_npu(node2, 4, link="DOWN")
    set_npu(node2, 6, net_health="Fault")
    set_npu(node2, 5, device_ip=None)
    try:
        audited = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "audit", "--json", "--npus-per-node", "8"],
                                 capture_output=True, text=True, timeout=300)
        rc, output, recap = playbook("--tags", "hccl", extra_inventory=plan_inventory(tmp_path / "p.yml"))
    finally:
        set_npu(node2, 4, link="UP")
        set_npu(node2, 6, net_health="Success")
    assert audited.returncode == 1, audited.stderr
    found = {(f["host"], f["npu"], f["code"]): f for f in json.loads(audited.stdout)["findings"] if f["component"] == "nic"}
    assert set(found) == {("node2", 4, "link-down"), ("node2", 6, "net-unhealthy"), ("node2", 5, "no-device-ip")}
    assert found[("node2", 6, "net-unhealthy")]["message"] == "NPU 6 NIC net health is Fault"
    flat = " ".join(output.split())
    assert rc == 2 and recap["node2"]["failed"] == 1, output[-3000:]
    assert "node2: npu4: link DOWN; npu6: net health Fault" in flat
    # node1's NICs are fine, but its npu4 cannot reach node2's: the ping check fails there, naming the pair
    assert recap["node1"]["failed"] == 1 and "node1: cross-node ping failed: npu4 -> node2 npu4 (10.20.2.15)" in flat
    assert "npu3 -> node2" not in flat
    assert "address_5=10.20.2.16" in sh(node2, "cat /etc/hccn.conf").stdout


def test_npu_tls_switches_that_differ_fail_the_audit_and_the_role_brings_them_to_the_inventory_s(fleet, tmp_path):
    """Issue 25: node2's NPU NICs have TLS on, node1's off (HCCL's links between them would hang until
    HCCL_CONNECT_TIMEOUT). The audit names both hosts (as many on as off) and TLS; `dapo_npu_tls: off` (a bare YAML
    off, which Ansible reads as false) makes the hccl_network role switch node2's off, after which the audit is clean
    of it and a second run changes nothing."""
    node2 = fleet["node2"]
    for npu in range(8):
        set_npu(node2, npu, tls=1)

    def tls_findings():
        audited = subprocess.run([sys.executable, "-m", "dapo_ops.cli", "audit", "--json", "--npus-per-node", "8"],
                                 capture_output=True, text=True, timeout=300)
        return audited, [f for f in json.loads(audited.stdout)["findings"] if f["code"] == "npu-tls-mixed"]

    audited, mixed = tls_findings()
    assert audited.returncode == 1, audited.stderr
    assert sorted((f["host"], f["actual"]) for f in mixed) == [("node1", "off"), ("node2", "on")]
    assert mixed[1]["message"].startswith("NPU NIC TLS is on on node2's NPUs 0-7 but off on 8 of the 16 NPUs")
    inventory = plan_inventory(tmp_path / "p.yml")
    inventory.write_text(inventory.read_text().replace("hccl_network_enabled: true",
                                                       "hccl_network_enabled: true\n    dapo_npu_tls: off"))
    rc, output, recap = playbook("--tags", "hccl", extra_inventory=inventory)
    assert rc == 0, output[-3000:]
    assert "changed: [node2] => (item=-i 0 -tls -s enable 0)" in output
    assert "tls_enable_0=0" in sh(node2, "cat /etc/hccn.conf").stdout
    assert tls_findings()[1] == []
    rc, output, recap = playbook("--tags", "hccl", extra_inventory=inventory)
    assert rc == 0 and all(r["changed"] == 0 for r in recap.values()), recap


def test_a_cut_off_npu_port_fails_the_ping_naming_host_npu_and_peer(sim, tmp_path):
    sim.up(FleetSpec(nodes=2, npus_per_node=8, provisioned=True, faults=("node2.npu3:roce=unreachable",)))
    rc, output, recap = playbook("--tags", "hccl", extra_inventory=plan_inventory(tmp_path / "p.yml"))
    assert rc != 0
    assert ("node1: cross-node ping failed: npu3 -> node2 npu3 (10.20.2.14): 3 packets transmitted, 0 received, "
            "100.00% packet loss") in output, output[-3000:]
    assert "node2: cross-node ping failed: npu3 -> node1 npu3 (10.20.1.14)" in output
    assert "npu2 ->" not in output and "npu4 ->" not in output
