"""Which wanted ports each active firewall would drop: the judges (ufw, firewalld, every input base chain of the
nftables and iptables rulesets) asked for every wanted port, and the preflight's one line per blocking firewall."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from dapo_ops.firewall.chains import Chain, walk
from dapo_ops.firewall.iptables import parse_iptables_save
from dapo_ops.firewall.managers import firewalld_verdict, firewalld_zones, ufw_active, ufw_verdict
from dapo_ops.firewall.nft import SERVICES, parse_nft_ruleset
from dapo_ops.firewall.ports import format_ranges, parse_port_map
from dapo_ops.model.variables import HCCL_PORTS, RAY_PORTS

Judge = tuple[str, Callable[[int], "str | None"]]  # (source label, port -> 'accept' | 'drop' | None)


@dataclass(frozen=True)
class Blocked:
    source: str                  # e.g. "nftables inet filter (chain input, policy drop)"
    ports: dict[str, list[tuple[int, int]]]  # wanted name -> blocked ranges


def _out(outputs: dict, name: str) -> str | None:
    entry = outputs.get(name) or {}
    return entry.get("stdout") if entry.get("rc") == 0 else None


def _manager_judges(outputs: dict) -> tuple[list[Judge], tuple[str, ...]]:
    """The judges of an active ufw and a running firewalld, and what of the rulesets they own is judged through them
    (ufw's `ufw-*` chains, firewalld's table)."""
    judges: list[Judge] = []
    ufw_text = _out(outputs, "ufw") or ""
    active = ufw_active(ufw_text)
    running = (_out(outputs, "firewalld_state") or "").strip() == "running"
    if active:
        judges.append(("ufw (default incoming policy and rules)", lambda p: ufw_verdict(ufw_text, p)))
    if running:
        zones = firewalld_zones(_out(outputs, "firewalld") or "")
        judges.append((f"firewalld (zone{'s' if len(zones) > 1 else ''} {', '.join(zones) or '?'})",
                       lambda p: firewalld_verdict(zones, p)))
    return judges, (("ufw-*",) if active else ()) + (("firewalld",) if running else ())


def _ruleset_texts(outputs: dict) -> tuple[str | None, str | None]:
    """`nft list ruleset` and `iptables-save`; the latter None when it is iptables-nft's view of the same rules."""
    nft_text, ipt_text = _out(outputs, "nft"), _out(outputs, "iptables")
    if ipt_text and nft_text is not None and "(nf_tables)" in ipt_text.split("\n", 1)[0]:
        ipt_text = None  # iptables-nft: the same rules as nft's, already judged
    return nft_text, ipt_text


def _chain_judge(base: Chain, chains: dict) -> Callable[[int], "str | None"]:
    return lambda p: walk(base, chains, p) or base.policy


def _ruleset_judges(nft_text: str | None, ipt_text: str | None, skip: tuple[str, ...]) -> list[Judge]:
    """One judge per input base chain of the rulesets (the tables a firewall manager owns skipped)."""
    parsed = parse_nft_ruleset(nft_text, skip) if nft_text else []
    if ipt_text:
        parsed += parse_iptables_save(ipt_text, tuple(s[:-1] for s in skip if s.endswith("*")))
    return [(f"{label} (chain {base.name}, policy {base.policy})", _chain_judge(base, chains))
            for label, bases, chains in parsed for base in bases]


def _cuts(texts: tuple[str | None, ...]) -> list[int]:
    """A verdict can only change at a port some rule names: every number of the outputs (and of the service
    names), and the one after it, sorted."""
    numbers = {int(n) for text in texts for n in re.findall(r"\d+", text or "") if 0 < int(n) <= 65535}
    numbers |= set(SERVICES.values())
    return sorted(numbers | {n + 1 for n in numbers})


def _segments(cuts: list[int], first: int, last: int) -> list[tuple[int, int]]:
    """first-last cut at the cuts: within a segment every port gets the same verdict."""
    inner = [c for c in cuts if first < c <= last]
    starts = [first, *inner]
    return [(a, b - 1) for a, b in zip(starts, [*inner, last + 1])]


def blocked_ports(outputs: dict, wanted: dict[str, tuple[int, int]]) -> list[Blocked]:
    """Raw command outputs ({name: {rc, stdout}} for nft, iptables, ufw, firewalld_state, firewalld) and the
    wanted ports ({label: (first, last)}) -> what each active firewall would drop (empty: nothing blocked)."""
    judges, skip = _manager_judges(outputs)
    nft_text, ipt_text = _ruleset_texts(outputs)
    judges += _ruleset_judges(nft_text, ipt_text, skip)
    cuts = _cuts((nft_text, ipt_text, _out(outputs, "ufw"), _out(outputs, "firewalld")))
    result = []
    for source, judge in judges:  # one port per segment is judged
        blocked = {name: [(a, b) for a, b in _segments(cuts, first, last) if judge(a) == "drop"]
                   for name, (first, last) in wanted.items()}
        blocked = {name: found for name, found in blocked.items() if found}
        if blocked:
            result.append(Blocked(source, blocked))
    return result


def firewall_problems(outputs: dict, ray_ports: object, hccl_ports: object) -> list[str]:
    """One line per blocking firewall, naming the ports; InventoryError for a bad port map."""
    from dapo_ops.ray_ports import LOCAL  # Ray's node-local ports: a firewall that drops them is wanted

    wanted = {f"Ray {k}": v for k, v in parse_port_map(ray_ports, RAY_PORTS.name).items() if k not in LOCAL}
    wanted.update({f"HCCL {k}": v for k, v in parse_port_map(hccl_ports, HCCL_PORTS.name).items()})
    return [f"{b.source} drops incoming TCP to "
            + "; ".join(f"{name} {format_ranges(found)}" for name, found in b.ports.items())
            for b in blocked_ports(outputs, wanted)]
