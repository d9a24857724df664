"""`iptables-save` -> the INPUT chain of its filter table (and the chains it calls), as Rule / Chain (see chains.py).

A rule matches a port when its conditions are about that port (`--dport`, `--dports`), about TCP, or about new
connections; it never matches when it is about loopback, established/related connections or another protocol; any
other option makes it uncertain."""

from __future__ import annotations

import shlex

from dapo_ops.firewall.chains import Chain, Rule, Table
from dapo_ops.firewall.ports import Ranges, ranges

_VERDICTS = {"ACCEPT": "accept", "DROP": "drop", "REJECT": "reject", "RETURN": "return"}
# targets that only log, mark or trace: the packet goes on to the next rule
_PASS_THROUGH = ("LOG", "NFLOG", "ULOG", "MARK", "CONNMARK", "CT", "NOTRACK", "TRACE", "AUDIT")
# options that change nothing for a peer's new TCP connection
_HARMLESS = ("-m", "--comment", "--reject-with")
_DPORTS = ("--dport", "--destination-port", "--dports", "--destination-ports")


def _options(args: list[str]) -> dict[str, list[str]]:
    """A rule's arguments -> {option: [its value per occurrence]}; a value after a '!' starts with '!'."""
    opts: dict[str, list[str]] = {}
    negated = False
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "!":
            negated = True
        elif word.startswith("-"):
            values = []
            while i < len(args) and not args[i].startswith("-") and args[i] != "!":
                values.append(args[i])
                i += 1
            opts.setdefault(word, []).append(("!" if negated else "") + " ".join(values))
            negated = False
    return opts


def _verdict(opts: dict[str, list[str]]) -> tuple[str, str | None] | None:
    """(verdict, chain of a jump / goto) from -j / -g (taken out of opts); None when the rule decides nothing."""
    jump, goto = opts.pop("-j", None), opts.pop("-g", None)
    target = (jump or goto or [None])[0]
    if target is None or target in _PASS_THROUGH:
        return None
    if target in _VERDICTS:
        return _VERDICTS[target], None
    return ("goto" if goto else "jump"), target


def _state_applies(opts: dict[str, list[str]]) -> bool:
    """--state / --ctstate (taken out of opts): whether new connections match."""
    values = [value for key in ("--state", "--ctstate") for value in opts.pop(key, [])]
    return all("NEW" in value.upper().split(",") for value in values)


def _interface(opts: dict[str, list[str]]) -> tuple[bool, bool]:
    """-i (taken out of opts): (applies: not loopback, certain: no other interface named)."""
    values = opts.pop("-i", [])
    return "lo" not in values, all(value == "lo" for value in values)


def _proto_applies(opts: dict[str, list[str]]) -> bool:
    """-p (taken out of opts): whether TCP matches."""
    proto = opts.pop("-p", [""])[0].lower()
    return not proto or proto in ("tcp", "6", "all")


def _dports(opts: dict[str, list[str]]) -> tuple[Ranges | None, bool]:
    """--dport(s) (taken out of opts): (the ports of the last one, certain: every one is known and not negated)."""
    ports, certain = None, True
    for value in (value for key in _DPORTS for value in opts.pop(key, [])):
        if value.startswith("!"):
            certain = False
            continue
        ports = ranges(value)
        if ports is None:
            certain = False
    return ports, certain


def _ipt_rule(args: list[str]) -> Rule | None:
    """The arguments after `-A CHAIN` -> Rule; None when it decides nothing (no target, a logging target...)."""
    opts = _options(args)
    decided = _verdict(opts)
    if decided is None:
        return None
    verdict, target = decided
    # every helper takes its options out of opts: call each one (no short-circuit), what is left is not known here
    state_applies = _state_applies(opts)
    not_lo, one_interface = _interface(opts)
    proto_applies = _proto_applies(opts)
    applies = state_applies and not_lo and proto_applies
    for key in _HARMLESS:
        opts.pop(key, None)
    ports, ports_certain = _dports(opts)
    certain = one_interface and ports_certain and not opts
    return Rule(verdict, target, ports, applies, certain)


def parse_iptables_save(text: str, skip_prefixes: tuple[str, ...] = ()) -> list[Table]:
    """`iptables-save` -> [("iptables filter", [INPUT], chains)] (empty when there is no filter table)."""
    chains: dict[str, Chain] = {}
    in_filter = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            in_filter = line == "*filter"
        elif in_filter and line.startswith(":"):
            name, policy = line[1:].split()[:2]
            chains[name] = Chain(name, policy.lower() if policy != "-" else None, [])
        elif in_filter and line.startswith("-A "):
            _add_rule(chains, shlex.split(line))
    if "INPUT" not in chains:
        return []
    if skip_prefixes and any(name.startswith(skip_prefixes) for name in chains):
        return []
    return [("iptables filter", [chains["INPUT"]], chains)]


def _add_rule(chains: dict[str, Chain], args: list[str]) -> None:
    """`-A CHAIN ARGS...` -> its Rule appended to CHAIN (a chain first seen here has no policy)."""
    chain = chains.setdefault(args[1], Chain(args[1], None, []))
    rule = _ipt_rule(args[2:])
    if rule:
        chain.rules.append(rule)
