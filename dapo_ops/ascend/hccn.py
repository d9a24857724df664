"""The NPU RoCE plan: its checks before any node is touched, and the peer pings that check it after (pure).

A plan is, per host, one device IP per NPU, the netmask, an optional gateway and an optional netdetect address
(the ``hccl_network`` role's knobs). ``plan_problems`` checks the shape of the whole play's plan before any node
is touched: one valid, fleet-unique IP per NPU, one subnet per node (an Atlas 800T A2 puts all 8 NPU ports of a
node in one subnet, where older 910 servers use four subnets; the [hccn] inventory section of Huawei's MindCluster
Ascend Deployer user guide), a gateway inside that subnet, and that NPU i of every host can reach NPU i of its peer
host (the next host of the play, the last one wrapping to the first) and be answered: the two
addresses share a subnet, or the sending side has a gateway.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from dapo_ops.ascend.hccn_tool import parse_hccn_ping
from dapo_ops.errors import ParseError
from dapo_ops.model.variables import DEVICE_GATEWAY, NPU_TLS


@dataclass(frozen=True)
class Peer:
    npu: int
    host: str
    address: str


def _ip(value) -> ipaddress.IPv4Address | None:
    try:
        return ipaddress.IPv4Address(str(value))
    except ValueError:
        return None


def _network(address: ipaddress.IPv4Address, netmask: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(f"{address}/{netmask}", strict=False)


def _mask_ok(netmask) -> bool:
    try:
        ipaddress.IPv4Network(f"0.0.0.0/{netmask}")
    except ValueError:
        return False
    return _ip(netmask) is not None


def _ranges(npus: list[int]) -> str:
    """[0, 1, 2, 5] -> 'npu0-2, npu5'."""
    parts, start = [], None
    for i, n in enumerate(npus):
        if start is None:
            start = n
        if i + 1 == len(npus) or npus[i + 1] != n + 1:
            parts.append(f"npu{start}" if start == n else f"npu{start}-{n}")
            start = None
    return ", ".join(parts)


def peer_host(order: list[str], host: str) -> str | None:
    """The host whose NPUs `host`'s NPUs ping: the next one of the play (the last wraps to the first)."""
    if host not in order or len(order) < 2:
        return None
    return order[(order.index(host) + 1) % len(order)]


def _address_problems(ips: list, npus: int) -> list[str]:
    problems = []
    if len(ips) != npus:
        problems.append(f"{len(ips)} device IPs for {npus} NPUs (one per NPU, in NPU-id order)")
    bad = [str(a) for a in ips if _ip(a) is None]
    if bad:
        problems.append(f"not IPv4 addresses: {', '.join(bad)}")
    dup = sorted({str(a) for a in ips if ips.count(a) > 1})
    if dup:
        problems.append(f"device IPs listed twice: {', '.join(dup)}")
    return problems


def _gateway_problems(gateway: ipaddress.IPv4Address | None, subnets: list[str],
                      good: list[ipaddress.IPv4Address]) -> list[str]:
    if gateway is None or len(subnets) != 1:
        return []
    if gateway not in ipaddress.IPv4Network(subnets[0]):
        return [f"gateway {gateway} is outside the NPUs' subnet {subnets[0]}"]
    if gateway in good:
        return [f"gateway {gateway} is also a device IP"]
    return []


def _host_problems(host: str, plan: dict) -> list[str]:
    ips = list(plan.get("device_ips") or [])
    problems = _address_problems(ips, int(plan.get("npus") or 0))
    netmask = str(plan.get("netmask") or "")
    if not _mask_ok(netmask):
        return problems + [f"netmask {netmask!r} is not a dotted IPv4 netmask"]
    good = [_ip(a) for a in ips if _ip(a) is not None]
    subnets = sorted({str(_network(a, netmask)) for a in good})
    if len(subnets) > 1:
        problems.append(f"device IPs span {', '.join(subnets)}: an Atlas 800T A2 puts all its NPU ports in one subnet")
    for knob in ("gateway", "netdetect"):
        value = str(plan.get(knob) or "")
        if value and _ip(value) is None:
            problems.append(f"{knob} {value!r} is not an IPv4 address")
    if str(plan.get("tls", "")).strip().lower() not in ("", "on", "off", "true", "false", "1", "0", "none"):
        problems.append(f"{NPU_TLS} {plan.get('tls')!r} is not on or off")
    return problems + _gateway_problems(_ip(plan.get("gateway") or ""), subnets, good)


def _shared_addresses(plans: dict[str, dict], order: list[str]) -> list[tuple[str, str]]:
    """(host, problem) for each device IP that an NPU of an earlier host of the play already has."""
    owners: dict[str, tuple[str, int]] = {}
    found = []
    for host in order:
        for npu, address in enumerate((plans.get(host) or {}).get("device_ips") or []):
            other = owners.setdefault(str(address), (host, npu))
            if other[0] != host:
                found.append((host, f"npu{npu} {address} is also npu{other[1]} of {other[0]} "
                                    "(device IPs must be unique in the fleet)"))
    return found


def _reach_problem(plans: dict[str, dict], host: str, peer: str) -> str | None:
    """Why NPUs of `host` cannot reach the same NPUs of `peer` and be answered (two well-formed plans), or None."""
    mine, theirs = plans[host], plans[peer]
    unreachable = []
    for npu, (a, b) in enumerate(zip(mine["device_ips"], theirs["device_ips"])):
        a, b = _ip(a), _ip(b)
        there = b in _network(a, mine["netmask"]) or bool(mine.get("gateway"))
        back = a in _network(b, theirs["netmask"]) or bool(theirs.get("gateway"))
        if not (there and back):
            unreachable.append(npu)
    if not unreachable:
        return None
    no_gateway = [h for h in (host, peer) if not plans[h].get("gateway")]
    subnets = " and ".join(sorted({str(_network(_ip(plans[h]["device_ips"][0]), plans[h]["netmask"]))
                                   for h in (host, peer)}))
    return (f"{_ranges(unreachable)} cannot reach the same NPUs of {peer}: subnets {subnets} differ and "
            f"{' and '.join(no_gateway)} set{'s' if len(no_gateway) == 1 else ''} no gateway "
            f"(set {DEVICE_GATEWAY}, or put both nodes in one subnet)")


def plan_problems(plans: dict[str, dict], order: list[str]) -> dict[str, list[str]]:
    """Check the play's RoCE plan. plans: host -> {device_ips, netmask, gateway, netdetect, npus}; order: the
    play's hosts in order. Returns host -> problems (only hosts with problems)."""
    problems: dict[str, list[str]] = {}
    for host in order:
        found = _host_problems(host, plans.get(host) or {})
        if found:
            problems[host] = found
    for host, problem in _shared_addresses(plans, order):
        problems.setdefault(host, []).append(problem)
    malformed = set(problems)
    for host in order:
        peer = peer_host(order, host)
        if peer is None or host in malformed or peer in malformed:
            continue
        problem = _reach_problem(plans, host, peer)
        if problem:
            problems.setdefault(host, []).append(problem)
    return problems


def ping_peers(plans: dict[str, dict], order: list[str], host: str) -> list[Peer]:
    """What each NPU of `host` pings: the same NPU of its peer host (none in a one-host play)."""
    peer = peer_host(order, host)
    if peer is None:
        return []
    theirs = (plans.get(peer) or {}).get("device_ips") or []
    count = min(len((plans.get(host) or {}).get("device_ips") or []), len(theirs))
    return [Peer(npu, peer, str(theirs[npu])) for npu in range(count)]


def ping_problems(outputs: dict[str, dict], peers: list[Peer]) -> list[str]:
    """outputs: 'ping<N>' -> {rc, stdout} (dapo_node_facts); one problem per NPU that did not reach its peer."""
    problems = []
    for peer in peers:
        what = f"npu{peer.npu} -> {peer.host} npu{peer.npu} ({peer.address})"
        result = outputs.get(f"ping{peer.npu}")
        if result is None:
            problems.append(f"{what}: not pinged")
            continue
        command = f"hccn_tool -i {peer.npu} -ping -g address {peer.address}"
        try:
            ping = parse_hccn_ping(result.get("stdout", ""), command)
        except ParseError as exc:
            problems.append(f"{what}: {exc}")
            continue
        if not ping.ok:
            problems.append(f"{what}: {ping.transmitted} packets transmitted, {ping.received} received, "
                            f"{ping.loss} packet loss")
    return problems
