"""`dapo-sim up --link-mbit N`: the option's checks, the spec it lands in, and the tc commands that limit the
management links (the bridge's egress, each node's veth both ways), never the training network."""
import json
from dataclasses import asdict

import pytest

from dapo_ops.errors import UsageError
from dapo_sim import netns
from dapo_sim.cli import main
from dapo_sim.fleet import FleetSpec, FleetState, NodeState, SimFleet
from tests.cli_runner import run_cli

NODE = NodeState(name="node1", index=1, ip=netns.node_ip(1), netns="dapo-node1", veth_host="dapo1h",
                 veth_node="dapo1n", dir="/nonexistent", data_ip=netns.node_data_ip(1), veth_data_host="dapo1d")


@pytest.mark.parametrize("value, needle", [
    ("0", "0 is not in the range 1<=x<=100000"),
    ("-5", "-5 is not in the range"),
    ("100001", "100001 is not in the range"),
    ("fast", "'fast' is not a valid integer"),
])
def test_a_bad_link_rate_is_a_one_line_usage_error(value, needle):
    result = run_cli("up", "--link-mbit", value, entry=main)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("dapo-sim: ") and "--link-mbit" in result.stderr and needle in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_validate_spec_checks_the_link_rate_for_callers_of_the_api_too():
    assert SimFleet.validate_spec(FleetSpec(nodes=2, link_mbit=100)) == []
    assert SimFleet.validate_spec(FleetSpec(nodes=2)) == []
    with pytest.raises(UsageError, match="--link-mbit must be between 1 and 100000 \\(got 0\\)"):
        SimFleet.validate_spec(FleetSpec(nodes=2, link_mbit=0))


@pytest.fixture
def fake_up(monkeypatch):
    """`sim up` without root: SimFleet.up records the spec, status reports a fleet with that spec."""
    seen = {}

    def up(self, spec):
        seen["spec"] = spec
        return FleetState(spec=asdict(spec), nodes=[NODE])

    def status(self):
        return {"up": True, "spec": asdict(seen["spec"]), "mirror": {"url": "http://10.77.0.1:8765", "alive": True},
                "nodes": [{"name": "node1", "ip": NODE.ip, "data_ip": NODE.data_ip, "data_nic": netns.DATA_NIC,
                           "netns": NODE.netns, "sshd": True}], "inventory": "hosts.yml"}

    monkeypatch.setattr(SimFleet, "up", up)
    monkeypatch.setattr(SimFleet, "status", status)
    return seen


def test_the_rate_goes_into_the_spec_and_status_shows_it(fake_up):
    result = run_cli("up", "--nodes", "2", "--link-mbit", "100", "--json", entry=main)
    assert result.returncode == 0, result.stderr
    assert fake_up["spec"] == FleetSpec(nodes=2, link_mbit=100)
    assert json.loads(result.stdout)["spec"]["link_mbit"] == 100
    table = run_cli("up", "--nodes", "2", "--link-mbit", "100", entry=main)
    assert "links 100 Mbit/s" in table.stdout
    unlimited = run_cli("up", "--nodes", "2", "--json", entry=main)
    assert fake_up["spec"] == FleetSpec(nodes=2) and json.loads(unlimited.stdout)["spec"]["link_mbit"] is None


def test_the_spec_with_a_rate_survives_fleet_json_and_differs_from_one_without():
    state = FleetState(spec=asdict(FleetSpec(nodes=2, link_mbit=100)), nodes=[NODE])
    stored = FleetState.from_json(state.to_json()).spec
    assert stored["link_mbit"] == 100
    # what `up` compares: the same spec restarts nothing, one without the rate (or with another) is a new fleet
    assert stored == json.loads(json.dumps(asdict(FleetSpec(nodes=2, link_mbit=100))))
    assert stored != json.loads(json.dumps(asdict(FleetSpec(nodes=2))))


def test_tbf_command_lines():
    assert netns.tbf_command("dapobr0", 100) == [
        "tc", "qdisc", "replace", "dev", "dapobr0", "root", "tbf", "rate", "100mbit", "burst", "131072",
        "latency", "50ms"]
    assert netns.tbf_command("dapo1n", 200, "dapo-node1") == [
        "tc", "-n", "dapo-node1", "qdisc", "replace", "dev", "dapo1n", "root", "tbf", "rate", "200mbit",
        "burst", "131072", "latency", "50ms"]
    # the burst holds two 64 KiB GSO packets, and 1 ms at the rate when that is more
    assert netns.tbf_command("dapobr0", 10_000)[netns.tbf_command("dapobr0", 10_000).index("burst") + 1] == "1250000"


@pytest.fixture
def commands(monkeypatch):
    """Every host command make_bridges and add_node run, none of them run."""
    ran = []
    monkeypatch.setattr(netns, "run", lambda cmd, what, **kw: ran.append(cmd))
    monkeypatch.setattr(netns, "create", lambda cmd, kind, name, record, peer="": ran.append(cmd))
    return ran


def test_the_management_links_are_limited_and_the_training_network_is_not(commands):
    netns.make_bridges(lambda kind, name: None, 100)
    netns.add_node(NODE, lambda kind, name: None, 100)
    tc = [cmd for cmd in commands if cmd[0] == "tc"]
    assert tc == [netns.tbf_command(netns.BRIDGE, 100), netns.tbf_command("dapo1h", 100),
                  netns.tbf_command("dapo1n", 100, "dapo-node1")]
    # each after its device is up (the node's end after it moved into the node's namespace)
    assert commands.index(tc[0]) > commands.index(["ip", "link", "set", netns.BRIDGE, "up"])
    assert commands.index(tc[2]) > commands.index(["ip", "-n", "dapo-node1", "link", "set", "dapo1n", "up"])


def test_no_rate_no_tc(commands):
    netns.make_bridges(lambda kind, name: None)
    netns.add_node(NODE, lambda kind, name: None)
    assert commands and not [cmd for cmd in commands if cmd[0] == "tc"]
