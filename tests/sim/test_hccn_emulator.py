"""The emulated hccn_tool's gateway, netdetect and cross-node ping over the simulated RoCE fabric table."""

import json

import pytest

from dapo_ops.ascend import hccn_tool
from dapo_ops.errors import UsageError
from dapo_sim import hwmodel

from .test_hwmodel_and_emulator import Node, model

HCCN = "hccn_tool"


def fleet(tmp_path, faults=(), npus=8):
    """Two emulated nodes sharing one fabric directory, each published as `sim up` publishes it."""
    fabric = tmp_path / "fabric"
    fabric.mkdir()
    nodes = {}
    for index, name in enumerate(("node1", "node2"), 1):
        (tmp_path / name).mkdir()
        hw = hwmodel.build_node_model(name, index, npus, [hwmodel.parse_fault(f) for f in faults],
                                      chip_name="910B3", hbm_mb=65536, factory_firmware="7.1.0.7.220",
                                      mcu_version="23.3.13")
        (fabric / f"{name}.json").write_text(json.dumps(hwmodel.fabric_entry(hw)))
        node = Node(tmp_path / name, hw)
        node.env["DAPO_SIM_FABRIC_DIR"] = str(fabric)
        nodes[name] = node
    return nodes


def ping(node, npu, address):
    return hccn_tool.parse_hccn_ping(node.run(HCCN, "-i", str(npu), "-ping", "-g", "address", address).stdout)


def set_plan(node, subnet, gateway=None, npus=8):
    for k in range(npus):
        node.run(HCCN, "-i", str(k), "-ip", "-s", "address", f"{subnet}.{11 + k}", "netmask", "255.255.255.0")
        if gateway:
            node.run(HCCN, "-i", str(k), "-gateway", "-s", "gateway", gateway)


def test_gateway_and_netdetect_set_read_back_and_persist(tmp_path):
    node = Node(tmp_path, model(npus=8))
    assert hccn_tool.parse_hccn_gateway(node.run(HCCN, "-i", "2", "-gateway", "-g").stdout) is None
    assert hccn_tool.parse_hccn_netdetect(node.run(HCCN, "-i", "2", "-netdetect", "-g").stdout) is None
    node.run(HCCN, "-i", "2", "-gateway", "-s", "gateway", "10.88.1.1")
    node.run(HCCN, "-i", "2", "-netdetect", "-s", "address", "10.88.1.1")
    assert hccn_tool.parse_hccn_gateway(node.run(HCCN, "-i", "2", "-gateway", "-g").stdout) == "10.88.1.1"
    assert hccn_tool.parse_hccn_netdetect(node.run(HCCN, "-i", "2", "-netdetect", "-g").stdout) == "10.88.1.1"
    conf = (tmp_path / "hccn.conf").read_text().splitlines()
    # the real file's keys, in the real file's order (docs/ascend-formats.md §3.3)
    assert conf[conf.index("address_2=10.88.1.13"):][:6] == [
        "address_2=10.88.1.13", "netmask_2=255.255.255.0", "netdetect_2=10.88.1.1", "gateway_2=10.88.1.1",
        "send_arp_status_2=1", "tls_enable_2=0"]
    bad = node.run(HCCN, "-i", "2", "-gateway", "-s", "gateway", ok=False)
    assert bad.returncode == 1 and "Parameter error" in bad.stdout


def test_per_node_subnets_need_a_gateway_to_ping_across(tmp_path):
    nodes = fleet(tmp_path)
    set_plan(nodes["node1"], "10.20.1")
    set_plan(nodes["node2"], "10.20.2")
    lost = ping(nodes["node1"], 3, "10.20.2.14")
    assert (lost.target, lost.received, lost.loss) == ("10.20.2.14", 0, "100.00%")
    out = nodes["node1"].run(HCCN, "-i", "3", "-ping", "-g", "address", "10.20.2.14").stdout
    assert out.splitlines()[1] == "recv time out seq=0"
    assert ping(nodes["node1"], 3, "10.20.1.15").ok  # the same subnet on its own node
    set_plan(nodes["node1"], "10.20.1", gateway="10.20.1.1")
    assert not ping(nodes["node1"], 3, "10.20.2.14").ok  # node2 cannot answer without its own gateway
    set_plan(nodes["node2"], "10.20.2", gateway="10.20.2.1")
    assert ping(nodes["node1"], 3, "10.20.2.14").ok and ping(nodes["node2"], 0, "10.20.1.11").ok
    first = nodes["node1"].run(HCCN, "-i", "3", "-ping", "-g", "address", "10.20.2.14").stdout.splitlines()
    assert first[0] == "device 3 PING 10.20.2.14" and first[1].startswith("recv seq=0,time=")
    assert not ping(nodes["node1"], 0, "10.20.2.99").ok  # no NPU has that address


def test_one_shared_subnet_reaches_without_a_gateway(tmp_path):
    nodes = fleet(tmp_path)
    for name, subnet in (("node1", "10.30.0"), ("node2", "10.30.0")):
        for k in range(2):
            host = 11 + k + (0 if name == "node1" else 50)
            nodes[name].run(HCCN, "-i", str(k), "-ip", "-s", "address", f"{subnet}.{host}", "netmask", "255.255.255.0")
    assert ping(nodes["node1"], 1, "10.30.0.62").ok


@pytest.mark.parametrize("fault, npu, address", [
    ("node2.npu3:roce=unreachable", 3, "10.20.2.14"),   # the peer port is cut off
    ("node1.npu3:roce=unreachable", 3, "10.20.2.14"),   # the local port is cut off
    ("node2.npu3:link=DOWN", 3, "10.20.2.14"),
    ("node1.npu3:link=DOWN", 3, "10.20.2.14"),
])
def test_faults_break_the_cross_node_ping(tmp_path, fault, npu, address):
    nodes = fleet(tmp_path, faults=(fault,))
    set_plan(nodes["node1"], "10.20.1", gateway="10.20.1.1")
    set_plan(nodes["node2"], "10.20.2", gateway="10.20.2.1")
    assert not ping(nodes["node1"], npu, address).ok
    assert ping(nodes["node1"], 2, "10.20.2.13").ok  # the other NPUs still reach theirs
    assert nodes["node1"].run(HCCN, "-i", str(npu), "-link", "-g").stdout.strip() == (
        "link status: DOWN" if fault == "node1.npu3:link=DOWN" else "link status: UP")


def test_fabric_entry_mirrors_the_emulator_and_roce_knob_is_validated(tmp_path):
    nodes = fleet(tmp_path, faults=("node1.npu5:roce=unreachable",))
    nodes["node1"].run(HCCN, "-i", "0", "-gateway", "-s", "gateway", "10.88.1.1")  # the node republishes itself
    published = json.loads((tmp_path / "fabric" / "node1.json").read_text())
    assert published == hwmodel.fabric_entry(nodes["node1"].hw())
    assert published["npus"][5]["roce"] == "unreachable" and published["npus"][0]["gateway"] == "10.88.1.1"
    assert "roce" in hwmodel.NPU_KNOBS
    with pytest.raises(UsageError, match="roce accepts only 'unreachable'"):
        hwmodel.parse_fault("node1.npu5:roce=slow")
