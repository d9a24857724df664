"""The host-firewall judge (dapo_ops.firewall) on recorded ruleset text.

tests/data/firewall/nft-*.txt and iptables-save-*.txt were recorded with nft 1.0.6 and iptables-nft 1.8.9 (Debian 12)
in a scratch network namespace (`nft -f RULES; nft list ruleset`, `iptables ...; iptables-save`);
nft-from-iptables-nft.txt is `nft list ruleset` of the iptables rules of iptables-save-reject.txt. The ufw and
firewalld files are written in the formats of `ufw status verbose` and `firewall-cmd --list-all` /
`--list-all-zones`."""

from pathlib import Path

import pytest

from dapo_ops import firewall as fw
from dapo_ops.errors import InventoryError

DATA = Path(__file__).parent.parent / "data" / "firewall"
# 52365 stands for a peer port here (Ray's default agent HTTP port is node-local: dapo_ops/ray_ports.py)
RAY = {"gcs": 6379, "dashboard": 8265, "client": 10001, "dashboard_agent_grpc": 52365, "workers": "10002-19999"}
HCCL = {"if_base": "60000-60031"}


def ok(name):
    return {"rc": 0, "stdout": (DATA / name).read_text(), "stderr": ""}


ABSENT = {"rc": 127, "stdout": "", "stderr": "command not found"}


def problems(ray=RAY, hccl=HCCL, **outputs):
    return fw.firewall_problems(outputs, ray, hccl)


def test_no_firewall_tools_or_empty_rulesets_block_nothing():
    assert problems(nft=ABSENT, iptables=ABSENT, ufw=ABSENT, firewalld_state=ABSENT) == []
    assert problems(nft=ok("nft-empty.txt"), ufw=ok("ufw-status-verbose-inactive.txt"),
                    firewalld_state={"rc": 252, "stdout": "not running\n", "stderr": ""}) == []


def test_input_policy_drop_with_a_named_set_for_ray_but_nothing_for_hccl():
    assert problems(nft=ok("nft-input-drop-ray-set.txt")) == [
        "nftables inet filter (chain input, policy drop) drops incoming TCP to HCCL if_base 60000-60031"]


def test_jumps_returns_source_limited_accepts_and_a_final_reject():
    # 10002-19999 accepted in the jumped-to chain, 52365 dropped there; 60000-60031 accepted from a subnet
    # (the peer may be in it: counted as open); everything else meets `reject`.
    assert problems(nft=ok("nft-jump-reject.txt")) == [
        "nftables inet filter (chain input, policy drop) drops incoming TCP to Ray dashboard_agent_grpc 52365"]


def test_explicit_drop_and_reject_rules_under_an_accept_policy():
    assert problems(nft=ok("nft-accept-with-drops.txt")) == [
        "nftables ip filter (chain INPUT, policy accept) drops incoming TCP to Ray gcs 6379; HCCL if_base 60000-60015"]


def test_ct_state_vmap_and_a_long_anonymous_set_open_everything_wanted():
    assert problems(nft=ok("nft-vmap-long-set.txt")) == []


def test_iptables_save_and_its_nft_view_agree():
    hccl_closed = {"if_base": "60032-60040"}
    expected = "drops incoming TCP to HCCL if_base 60032-60040"
    legacy = problems(hccl=hccl_closed, iptables=ok("iptables-save-reject.txt"))
    assert legacy == [f"iptables filter (chain INPUT, policy drop) {expected}"]
    as_nft = problems(hccl=hccl_closed, nft=ok("nft-from-iptables-nft.txt"))
    assert as_nft == [f"nftables ip filter (chain INPUT, policy drop) {expected}"]
    # iptables-nft shows the same rules as nft: judged once
    assert problems(hccl=hccl_closed, nft=ok("nft-from-iptables-nft.txt"), iptables=ok("iptables-save-reject.txt")) \
        == as_nft


def test_ray_ports_picked_by_the_kernel_are_blocked_by_a_default_drop():
    ray = dict(RAY, ephemeral="32768-60999")
    [line] = problems(ray=ray, iptables=ok("iptables-save-reject.txt"))
    assert line.endswith("Ray ephemeral 32768-52364, 52366-59999, 60032-60999")


def test_a_firewall_dropping_rays_node_local_ports_is_what_dapo_ops_wants():
    """The dashboard, its agent's HTTP port and the Ray Client answer on the node itself only (issue 15): a site
    firewall that drops them from peers is not a problem, one that drops a peer port still is."""
    local_only = {"dashboard": 8265, "client": 10001, "dashboard_agent": 52365, "gcs": 6379}
    assert problems(ray=local_only, nft=ok("nft-jump-reject.txt")) == []
    assert problems(ray=dict(local_only, node_manager=6380), nft=ok("nft-jump-reject.txt")) == [
        "nftables inet filter (chain input, policy drop) drops incoming TCP to Ray node_manager 6380"]


def test_ufw_active_default_deny():
    assert problems(ufw=ok("ufw-status-verbose-active.txt")) == [
        "ufw (default incoming policy and rules) drops incoming TCP to Ray dashboard_agent_grpc 52365; "
        "HCCL if_base 60000-60031"]


def test_firewalld_running_default_zone():
    running = {"rc": 0, "stdout": "running\n", "stderr": ""}
    assert problems(firewalld_state=running, firewalld=ok("firewalld-list-all.txt")) == [
        "firewalld (zone public) drops incoming TCP to HCCL if_base 60000-60031"]
    assert problems(firewalld_state=running, firewalld=ok("firewalld-list-all-trusted.txt")) == []


def test_firewalld_judges_every_zone_that_takes_traffic():
    """`firewall-cmd --list-all-zones`: the cluster NIC in an active `trusted` zone is open even though the default
    zone does not list HCCL's ports; zones nothing is bound to do not count."""
    running = {"rc": 0, "stdout": "running\n", "stderr": ""}
    assert problems(firewalld_state=running, firewalld=ok("firewalld-list-all-zones.txt")) == []
    assert problems(firewalld_state=running, firewalld=ok("firewalld-list-all-zones-trusted-unused.txt")) == [
        "firewalld (zone public) drops incoming TCP to HCCL if_base 60000-60031"]


@pytest.mark.parametrize("spec, expected", [(6379, (6379, 6379)), ("10002-19999", (10002, 19999)),
                                            ("60000:60031", (60000, 60031)), (" 8265 ", (8265, 8265))])
def test_port_specs(spec, expected):
    assert fw.parse_port_spec(spec) == expected


@pytest.mark.parametrize("ports, message", [
    ({"gcs": "abc"}, "dapo_ray_ports.gcs: 'abc' is not a port or a range FIRST-LAST"),
    ({"gcs": 0}, "dapo_ray_ports.gcs: 0 is not within 1-65535"),
    ({"workers": "19999-10002"}, "FIRST <= LAST"),
    ({"gcs": 70000}, "not within 1-65535"),
    ({"gcs": True}, "is not a port"),
    ([6379], "must be a mapping"),
    ({}, "must be a mapping"),
])
def test_bad_port_maps_are_one_line_errors(ports, message):
    with pytest.raises(InventoryError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        fw.parse_port_map(ports, "dapo_ray_ports")
    assert "\n" not in str(info.value)


def test_the_filters_the_preflight_role_uses():
    from filter_plugins.dapo_ops import FilterModule

    filters = FilterModule().filters()
    assert filters["dapo_port_map_errors"]({"gcs": "x"}, "dapo_ray_ports") == [
        "dapo_ray_ports.gcs: 'x' is not a port or a range FIRST-LAST"]
    assert filters["dapo_port_map_errors"]({"gcs": 6379, "workers": "10002-19999"}, "dapo_ray_ports") == []
    assert filters["dapo_port_map_errors"]({"gcs": 6380}, "dapo_ray_ports") == [
        "dapo_ray_ports.gcs: 6380 is also dapo_ray_ports.node_manager (6380)"]
    assert filters["dapo_ray_ports_with_defaults"]({"gcs": 7000})["gcs"] == "7000"
    assert filters["dapo_firewall_problems"]({"nft": ok("nft-input-drop-ray-set.txt")}, RAY, HCCL)
