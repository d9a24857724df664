"""The rule model both ruleset formats are read into (Rule, Chain), and the walk that gives a port's verdict in a
chain: the one evaluation nftables and iptables share."""

from __future__ import annotations

from dataclasses import dataclass

from dapo_ops.firewall.ports import Ranges, covers


@dataclass(frozen=True)
class Rule:
    verdict: str               # accept | drop | reject | return | jump | goto | none
    target: str | None = None  # chain of a jump/goto
    ports: Ranges | None = None  # TCP destination ports the rule is about (None: any)
    applies: bool = True       # False: never matches a new TCP connection from a peer (lo, established, udp...)
    certain: bool = True       # False: has conditions not known here (source, interface...)


@dataclass
class Chain:
    name: str
    policy: str | None         # accept | drop for a base chain on the input hook; None for a regular chain
    rules: list[Rule]


# (label, input base chains, every chain of the table by name): what a ruleset parser returns per table
Table = tuple[str, list[Chain], dict]


def _matches(rule: Rule, port: int) -> bool:
    """Whether a new TCP connection to port from a peer may match the rule."""
    return rule.applies and (rule.ports is None or covers(rule.ports, port))


def _jump(rule: Rule, chain: Chain, chains: dict, port: int, seen: tuple) -> tuple[bool, str | None]:
    """A jump / goto: (decided, verdict). The called chain's accept decides; its drop only when the jump is
    certain; a certain goto that falls through the called chain ends this chain too (None)."""
    sub = chains.get(rule.target)
    if sub is None or sub.name in seen:
        return False, None
    verdict = walk(sub, chains, port, seen + (chain.name,))
    if verdict == "accept" or (verdict == "drop" and rule.certain):
        return True, verdict
    if rule.verdict == "goto" and rule.certain:
        return True, None
    return False, None


def _decide(rule: Rule) -> tuple[bool, str | None]:
    """A return / accept / drop / reject: (decided, verdict). An uncertain return or drop does not decide."""
    if rule.verdict == "return":
        return rule.certain, None
    if rule.verdict == "accept":
        return True, "accept"
    return rule.certain, "drop"


def walk(chain: Chain, chains: dict, port: int, seen: tuple = ()) -> str | None:
    """The verdict a new TCP connection to port gets in chain: 'accept', 'drop' or None (falls through)."""
    for rule in chain.rules:
        if not _matches(rule, port):
            continue
        if rule.verdict in ("jump", "goto"):
            decided, verdict = _jump(rule, chain, chains, port, seen)
        else:
            decided, verdict = _decide(rule)
        if decided:
            return verdict
    return None
