"""The NPU RoCE plan checks, the peer pings and the hccl_network role's filters (pure)."""

import pytest

from dapo_ops.ascend import hccn, nic
from dapo_ops.errors import ParseError
from dapo_ops.inventory import load_inventory
from dapo_ops.paths import INVENTORY_DIR

from .test_hccn_tool import PING_LOST, PING_OK


def plan(ips, gateway="", netmask="255.255.255.0", netdetect="", npus=8):
    return {"device_ips": ips, "netmask": netmask, "gateway": gateway, "netdetect": netdetect, "npus": npus}


def node_ips(subnet, count=8):
    return [f"{subnet}.{11 + k}" for k in range(count)]


def example_plans():
    inventory = load_inventory(INVENTORY_DIR / "example")
    return {h.name: plan(h.vars["dapo_device_ips"], h.vars.get("dapo_device_gateway", ""),
                         h.vars.get("dapo_device_netmask", "255.255.255.0"), h.vars.get("dapo_device_netdetect", ""),
                         h.vars["dapo_npus_per_node"]) for h in inventory.hosts}, inventory.names()


def test_example_inventory_plan_is_routable_across_nodes():
    plans, order = example_plans()
    assert hccn.plan_problems(plans, order) == {}
    assert [(p.npu, p.host, p.address) for p in hccn.ping_peers(plans, order, "a2-node01")][:2] == [
        (0, "a2-node02", "10.20.2.11"), (1, "a2-node02", "10.20.2.12")]
    assert hccn.ping_peers(plans, order, "a2-node02")[7] == hccn.Peer(7, "a2-node01", "10.20.1.18")


def test_per_node_subnets_without_a_gateway_cannot_reach_each_other():
    plans, order = example_plans()
    for p in plans.values():
        p["gateway"] = ""
    problems = hccn.plan_problems(plans, order)
    assert set(problems) == {"a2-node01", "a2-node02"}
    assert problems["a2-node01"] == [
        "npu0-7 cannot reach the same NPUs of a2-node02: subnets 10.20.1.0/24 and 10.20.2.0/24 differ and "
        "a2-node01 and a2-node02 set no gateway (set dapo_device_gateway, or put both nodes in one subnet)"]
    # one side with a gateway is not enough: the answer has to come back
    plans["a2-node01"]["gateway"] = "10.20.1.1"
    assert "a2-node02 sets no gateway" in hccn.plan_problems(plans, order)["a2-node01"][0]


def test_one_flat_subnet_needs_no_gateway():
    plans = {"n1": plan(node_ips("10.20.1"), netmask="255.255.0.0"),
             "n2": plan(node_ips("10.20.2"), netmask="255.255.0.0")}
    assert hccn.plan_problems(plans, ["n1", "n2"]) == {}


@pytest.mark.parametrize("mine, message", [
    (plan(node_ips("10.20.1", 7)), "7 device IPs for 8 NPUs"),
    (plan(node_ips("10.20.1", 7) + ["10.20.1.11"]), "device IPs listed twice: 10.20.1.11"),
    (plan(node_ips("10.20.1", 7) + ["10.20.1.300"]), "not IPv4 addresses: 10.20.1.300"),
    (plan(node_ips("10.20.1", 7) + ["10.20.9.18"], gateway="10.20.1.1"), "span 10.20.1.0/24, 10.20.9.0/24"),
    (plan(node_ips("10.20.1"), netmask="255.0.255.0"), "netmask '255.0.255.0' is not a dotted IPv4 netmask"),
    (plan(node_ips("10.20.1"), gateway="10.20.2.1"), "gateway 10.20.2.1 is outside the NPUs' subnet 10.20.1.0/24"),
    (plan(node_ips("10.20.1"), gateway="10.20.1.11"), "gateway 10.20.1.11 is also a device IP"),
    (plan(node_ips("10.20.1"), gateway="10.20.1.1", netdetect="gw"), "netdetect 'gw' is not an IPv4 address"),
])
def test_plan_shape_problems(mine, message):
    plans = {"n1": mine, "n2": plan(node_ips("10.20.2"), gateway="10.20.2.1")}
    problems = hccn.plan_problems(plans, ["n1", "n2"])
    assert list(problems) == ["n1"] and any(message in p for p in problems["n1"]), problems


def test_device_ips_must_be_unique_across_the_fleet():
    plans = {"n1": plan(node_ips("10.20.1"), gateway="10.20.1.1"), "n2": plan(node_ips("10.20.1"), gateway="10.20.1.1")}
    problems = hccn.plan_problems(plans, ["n1", "n2"])
    assert problems["n2"][0] == "npu0 10.20.1.11 is also npu0 of n1 (device IPs must be unique in the fleet)"


def test_one_host_has_no_peer_and_three_hosts_form_a_ring():
    one = {"n1": plan(node_ips("10.20.1"))}
    assert hccn.plan_problems(one, ["n1"]) == {} and hccn.ping_peers(one, ["n1"], "n1") == []
    ring = {f"n{k}": plan(node_ips(f"10.20.{k}"), gateway=f"10.20.{k}.1") for k in (1, 2, 3)}
    assert [hccn.ping_peers(ring, list(ring), h)[0].host for h in ring] == ["n2", "n3", "n1"]


def test_ping_problems_name_the_npu_and_its_peer():
    peers = [hccn.Peer(0, "node2", "10.20.2.11"), hccn.Peer(1, "node2", "10.20.2.12"),
             hccn.Peer(2, "node2", "10.20.2.13")]
    outputs = {"ping0": {"rc": 0, "stdout": PING_OK}, "ping1": {"rc": 0, "stdout": PING_LOST},
               "ping2": {"rc": 1, "stdout": "dcmi module initialize failed. ret is -8005"}}
    problems = hccn.ping_problems(outputs, peers)
    assert problems[0] == "npu1 -> node2 npu1 (10.20.2.12): 3 packets transmitted, 0 received, 100.00% packet loss"
    assert problems[1].startswith("npu2 -> node2 npu2 (10.20.2.13): cannot parse `hccn_tool -i 2 -ping -g address")
    assert len(problems) == 2


def test_config_problems_compare_the_readback_with_the_plan():
    mine = plan(["10.20.1.11", "10.20.1.12"], gateway="10.20.1.1", netdetect="10.20.1.1", npus=2)
    outputs = {
        "ip0": {"stdout": "ipaddr:10.20.1.11\nnetmask:255.255.255.0"},
        "gateway0": {"stdout": "default gateway:10.20.1.1, Iface:eth0"},
        "netdetect0": {"stdout": "netdetect address: 10.20.1.1"},
        "ip1": {"stdout": "ipaddr:10.20.1.99\nnetmask:255.255.255.0"},
        "gateway1": {"stdout": "default gateway:, Iface:eth1"},
        "netdetect1": {"stdout": "netdetect address: 10.20.1.1"},
    }
    assert nic.config_problems(outputs, mine) == [
        "npu1: ip 10.20.1.99/255.255.255.0, planned 10.20.1.12/255.255.255.0", "npu1: gateway unset, planned 10.20.1.1"]
    mine["gateway"] = mine["netdetect"] = ""  # not planned: not checked
    assert nic.config_problems(outputs, mine) == ["npu1: ip 10.20.1.99/255.255.255.0, planned 10.20.1.12/255.255.255.0"]


def test_planned_commands_set_only_what_differs_ip_first():
    mine = plan(["10.20.1.11", "10.20.1.12", "10.20.1.13"], gateway="10.20.1.1", netdetect="10.20.1.1", npus=3)
    outputs = {
        "ip0": {"stdout": "ipaddr:10.20.1.11\nnetmask:255.255.255.0"},
        "gateway0": {"stdout": "default gateway:10.20.1.1, Iface:eth0"},
        "netdetect0": {"stdout": "netdetect address: 10.20.1.1"},
        "ip1": {"rc": 1, "stdout": "Get ipconf failed, because no ip was preset there!"},
        "gateway1": {"stdout": "default gateway:, Iface:eth1"},
        "netdetect1": {"stdout": "netdetect address: "},
        "ip2": {"stdout": "ipaddr:10.88.1.13\nnetmask:255.255.255.0"},
        "gateway2": {"stdout": "default gateway:10.20.1.1, Iface:eth2"},
        "netdetect2": {"stdout": "netdetect address: 10.20.1.254"},
    }
    t = ["hccn_tool"]
    assert nic.planned_commands(outputs, mine, "hccn_tool") == [
        t + ["-i", "1", "-ip", "-s", "address", "10.20.1.12", "netmask", "255.255.255.0"],
        t + ["-i", "1", "-gateway", "-s", "gateway", "10.20.1.1"],
        t + ["-i", "1", "-netdetect", "-s", "address", "10.20.1.1"],
        t + ["-i", "2", "-ip", "-s", "address", "10.20.1.13", "netmask", "255.255.255.0"],
        t + ["-i", "2", "-netdetect", "-s", "address", "10.20.1.1"],
    ]
    mine["gateway"] = mine["netdetect"] = ""  # not planned: left as they are
    assert [c[3] for c in nic.planned_commands(outputs, mine, "hccn_tool")] == ["-ip", "-ip"]
    # a tool that did not answer (failed, or not installed yet: a fresh node in check mode) leaves the value unknown,
    # so the plan's call is made (and a failing tool then fails that call, with its own message)
    outputs["gateway1"] = {"rc": 255, "stdout": "dcmi module initialize failed. ret is -8005"}
    mine["gateway"] = "10.20.1.1"
    assert t + ["-i", "1", "-gateway", "-s", "gateway", "10.20.1.1"] in nic.planned_commands(outputs, mine, "hccn_tool")
    fresh = {f"{q}{n}": {"rc": 127, "stdout": ""} for q in ("ip", "gateway", "netdetect") for n in range(3)}
    assert len(nic.planned_commands(fresh, mine, "hccn_tool")) == 6 and len(nic.planned_commands({}, mine, "x")) == 6
    outputs["gateway1"] = {"rc": 0, "stdout": "something else entirely"}  # answered, but not in the known format
    with pytest.raises(ParseError, match="hccn_tool -i 1 -gateway -g"):
        nic.planned_commands(outputs, mine, "hccn_tool")


def tls_line(npu: int, on: int) -> dict:
    return {"stdout": f"dev_id:{npu}, tls switch[{on}](0:disable, 1:enable), tls preconfigured[1](0:non-preset, "
                      "1:preset), tls alarm time threshold[60]days"}


@pytest.mark.parametrize("wanted, switch", [("off", "0"), (False, "0"), ("on", "1"), (True, "1")])
def test_the_tls_switch_is_set_where_it_differs_and_checked_after(wanted, switch):
    mine = plan(["10.20.1.11", "10.20.1.12"], npus=2)
    mine["tls"] = wanted
    state = 1 if switch == "1" else 0
    outputs = {"ip0": {"stdout": "ipaddr:10.20.1.11\nnetmask:255.255.255.0"},
               "ip1": {"stdout": "ipaddr:10.20.1.12\nnetmask:255.255.255.0"},
               "tls0": tls_line(0, state), "tls1": tls_line(1, 1 - state)}
    assert nic.planned_commands(outputs, mine, "hccn_tool") == [["hccn_tool", "-i", "1", "-tls", "-s", "enable", switch]]
    assert nic.config_problems(outputs, mine) == [f"npu1: tls {'off' if state else 'on'}, planned {'on' if state else 'off'}"]
    mine["tls"] = ""                                         # not planned: left as it is, not checked
    assert nic.planned_commands(outputs, mine, "hccn_tool") == [] and nic.config_problems(outputs, mine) == []


def test_a_tls_value_that_is_neither_on_nor_off_is_a_plan_problem():
    mine = plan(["10.20.1.11", "10.20.1.12"], npus=2)
    mine["tls"] = "maybe"
    assert hccn.plan_problems({"n1": mine}, ["n1"]) == {"n1": ["dapo_npu_tls 'maybe' is not on or off"]}


def test_ping_commands_and_filters():
    peers = [{"npu": 3, "host": "node2", "address": "10.20.2.14"}]
    assert nic.ping_commands(peers, "/t/hccn_tool") == {
        "ping3": ["/t/hccn_tool", "-i", "3", "-ping", "-g", "address", "10.20.2.14"]}
    assert {"dapo_hccn_gateway", "dapo_hccn_plan_problems", "dapo_hccn_ping_problems"} <= set(nic.FILTERS)
