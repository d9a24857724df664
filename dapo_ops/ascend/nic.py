"""NPU NIC state from hccn_tool output (pure): what a good NIC reads, and the hccl_network role's filters."""

from __future__ import annotations

from dapo_ops.ascend import hccn
from dapo_ops.ascend.hccn_tool import (parse_hccn_gateway, parse_hccn_ip, parse_hccn_link, parse_hccn_net_health,
                                       parse_hccn_netdetect, parse_hccn_tls)
from dapo_ops.errors import ParseError
from dapo_ops.model.variables import NPU_TLS


# What a good NPU NIC reads ("the results must all be success and the status must be UP": vllm-ascend's
# docs/source/tutorials/multi_node.md). The one rule the hccl_network role (nic_problems) and the audit (its
# link-down and net-unhealthy findings, its report's L / N marks) apply, through nic_faults.
GOOD_NIC = {"link": "UP", "net_health": "Success"}


def nic_faults(link: str | None = None, net_health: str | None = None) -> dict[str, str]:
    """The readings of an NPU NIC (hccn_tool -link -g, -net_health -g) that are not what a good NIC reads (link UP,
    net health Success): name -> value, link first. A reading that is None (not taken, or unknown) is not judged."""
    readings = {"link": link, "net_health": net_health}
    return {name: value for name, value in readings.items() if value is not None and value != GOOD_NIC[name]}


def nic_problems(outputs: dict[str, dict], npu_ids: list[int]) -> list[str]:
    """outputs: name -> {rc, stdout} for link<N>, net_health<N> (as dapo_node_facts returns them)."""
    problems = []
    for npu in npu_ids:
        for query, parse in (("link", parse_hccn_link), ("net_health", parse_hccn_net_health)):
            result = outputs.get(f"{query}{npu}")
            if result is None:
                problems.append(f"npu{npu}: no {query} reading")
                continue
            try:
                value = parse(result.get("stdout", ""), f"hccn_tool -i {npu} -{query} -g")
            except ParseError as exc:
                problems.append(f"npu{npu}: {exc}")
                continue
            for name, bad in nic_faults(**{query: value}).items():
                problems.append(f"npu{npu}: {name.replace('_', ' ')} {bad}")
    return problems


def tls_wanted(value) -> bool | None:
    """The plan's TLS switch: True (on), False (off) or None (leave it); YAML's bare on/off arrive as booleans."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text == "":
        return None
    if text in ("on", "true", "1", "enable"):
        return True
    if text in ("off", "false", "0", "disable"):
        return False
    raise ParseError(NPU_TLS.name, f"{value!r} is not on or off")


def config_problems(outputs: dict[str, dict], plan: dict) -> list[str]:
    """What the NICs report (ip<N>, gateway<N>, netdetect<N> outputs) against the plan ({device_ips, netmask,
    gateway, netdetect}; an empty gateway / netdetect is not checked: the role leaves those as they are)."""
    problems = []
    for npu, address in enumerate(plan.get("device_ips") or []):
        readings = (
            ("ip", parse_hccn_ip, "-ip", lambda ip: (ip.address, ip.netmask),
             (str(address), str(plan.get("netmask")))),
            ("gateway", parse_hccn_gateway, "-gateway", lambda g: g, plan.get("gateway") or None),
            ("netdetect", parse_hccn_netdetect, "-netdetect", lambda a: a, plan.get("netdetect") or None),
            ("tls", parse_hccn_tls, "-tls", lambda on: "on" if on else "off",
             {True: "on", False: "off", None: None}[tls_wanted(plan.get("tls"))]),
        )
        for name, parse, flag, value_of, want in readings:
            if want is None:
                continue
            result = outputs.get(f"{name}{npu}")
            if result is None:
                problems.append(f"npu{npu}: no {name} reading")
                continue
            try:
                got = value_of(parse(result.get("stdout", ""), f"hccn_tool -i {npu} {flag} -g"))
            except ParseError as exc:
                problems.append(f"npu{npu}: {exc}")
                continue
            if got != want:
                show = "/".join(x or "unset" for x in got) if isinstance(got, tuple) else (got or "unset")
                wanted = "/".join(want) if isinstance(want, tuple) else want
                problems.append(f"npu{npu}: {name} {show}, planned {wanted}")
    return problems


def _reading(outputs: dict[str, dict], key: str, parse, command: str):
    """A parsed hccn_tool reading, or None when the tool did not answer (not installed yet, as on a fresh node in
    check mode, or it failed): the value is then unknown and the plan's call is made. Output the tool printed with
    success but that does not parse still raises ParseError."""
    result = outputs.get(key) or {}
    if result.get("rc") not in (0, None) or not (result.get("stdout") or "").strip():
        return None
    return parse(result["stdout"], command)


def planned_commands(outputs: dict[str, dict], plan: dict, hccn_tool: str) -> list[list[str]]:
    """The hccn_tool calls that bring the NICs to the plan, from what they report (ip<N>, gateway<N>,
    netdetect<N> outputs): per NPU its address (-ip -s address A netmask M) first, then the gateway (-gateway -s
    gateway G, which must lie in that subnet), then the link-detection address (-netdetect -s address D); only
    what differs (a reading the tool did not give counts as different), and nothing for an empty gateway /
    netdetect; last the TLS switch (-tls -s enable 0|1) when the plan sets one."""
    commands = []
    netmask = str(plan.get("netmask"))
    for npu, address in enumerate(plan.get("device_ips") or []):
        base = [hccn_tool, "-i", str(npu)]
        ip = _reading(outputs, f"ip{npu}", parse_hccn_ip, f"hccn_tool -i {npu} -ip -g")
        if ip is None or (ip.address, ip.netmask) != (str(address), netmask):
            commands.append(base + ["-ip", "-s", "address", str(address), "netmask", netmask])
        gateway = plan.get("gateway") or ""
        if gateway and _reading(outputs, f"gateway{npu}", parse_hccn_gateway,
                                f"hccn_tool -i {npu} -gateway -g") != gateway:
            commands.append(base + ["-gateway", "-s", "gateway", gateway])
        netdetect = plan.get("netdetect") or ""
        if netdetect and _reading(outputs, f"netdetect{npu}", parse_hccn_netdetect,
                                  f"hccn_tool -i {npu} -netdetect -g") != netdetect:
            commands.append(base + ["-netdetect", "-s", "address", netdetect])
        tls = tls_wanted(plan.get("tls"))
        if tls is not None and _reading(outputs, f"tls{npu}", parse_hccn_tls, f"hccn_tool -i {npu} -tls -g") != tls:
            commands.append(base + ["-tls", "-s", "enable", "1" if tls else "0"])
    return commands


def ping_commands(peers: list[dict], hccn_tool: str) -> dict[str, list[str]]:
    """dapo_node_facts commands for the peer pings: ping<N> -> hccn_tool -i N -ping -g address PEER
    (vllm-ascend at the pinned tag, docs/source/tutorials/multi_node.md, "Cross-Node PING Test")."""
    return {f"ping{p['npu']}": [hccn_tool, "-i", str(p["npu"]), "-ping", "-g", "address", p["address"]]
            for p in peers}


def _peers(plans: dict, order: list[str], host: str) -> list[dict]:
    return [{"npu": p.npu, "host": p.host, "address": p.address} for p in hccn.ping_peers(plans, order, host)]


def _ping_problems(outputs: dict, peers: list[dict]) -> list[str]:
    return hccn.ping_problems(outputs or {}, [hccn.Peer(int(p["npu"]), p["host"], p["address"]) for p in peers])


# name -> function, registered by filter_plugins/dapo_ops.py (each gets the raw text / data first)
FILTERS = {
    "dapo_hccn_gateway": parse_hccn_gateway,
    "dapo_hccn_netdetect": parse_hccn_netdetect,
    "dapo_hccn_plan_problems": hccn.plan_problems,
    "dapo_hccn_ping_peers": _peers,
    "dapo_hccn_ping_commands": ping_commands,
    "dapo_hccn_ping_problems": _ping_problems,
    "dapo_hccn_config_problems": config_problems,
    "dapo_hccn_planned_commands": planned_commands,
}
