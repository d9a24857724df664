"""`nft list ruleset` -> the input base chains of its ip / inet tables, as Rule / Chain (see chains.py).

A rule matches a port when its conditions are about that port (`tcp dport`, `th dport`, sets and ranges), about
TCP, or about new connections; it never matches when it is about loopback, established/related/invalid connections,
UDP or ICMP; any other condition makes it uncertain."""

from __future__ import annotations

import re

from dapo_ops.firewall.chains import Chain, Rule, Table
from dapo_ops.firewall.ports import Ranges, span

VERDICTS = ("accept", "drop", "reject", "return", "jump", "goto", "continue", "queue")
SERVICES = {"ssh": 22, "http": 80, "https": 443, "domain": 53, "ntp": 123, "smtp": 25}

# ------------------------------------------------------------------------------------------------------ rules

# what a rule's text may say besides its port and state conditions and still be certain: protocol tcp, counters,
# logging, comments
_NOISE = (r"\b(meta l4proto|ip protocol) (tcp|\{ ?tcp ?\})", r"\bcounter( packets \d+ bytes \d+)?",
          r'\blog( prefix "[^"]*")?( level \S+)?( flags \S+)?', r'\bcomment "[^"]*"', r"\s*#.*$")


def _nft_ports(spec: str, sets: dict[str, str]) -> Ranges | None:
    """A dport operand -> ranges; None when it is not known here (a set not found, an unknown service name)."""
    if spec.startswith("@"):
        spec = sets.get(spec[1:], "")
        if not spec:
            return None
    out = []
    for word in (w for w in re.split(r"[\s,{}]+", spec) if w):
        found = (SERVICES[word], SERVICES[word]) if word in SERVICES else span(word)
        if found is None:
            return None
        out.append(found)
    return tuple(out)


def _verdict(line: str) -> tuple[str, str | None]:
    """The rule's first verdict word and, for jump / goto, its chain: ('none', None) when it has none."""
    words = line.split()
    for i, word in enumerate(words):
        if word in VERDICTS:
            return word, words[i + 1] if word in ("jump", "goto") and i + 1 < len(words) else None
    return "none", None


def _ct_state_applies(body: str) -> tuple[bool, str]:
    """A `ct state` condition: (whether new connections match it, the body without it)."""
    ct = re.search(r"\bct state (?:\{([^}]*)\}|(\S+))", body)
    if not ct:
        return True, body
    states = {s.strip() for s in re.split(r"[,\s]+", ct.group(1) or ct.group(2)) if s.strip()}
    return "new" in states, body.replace(ct.group(0), " ")


def _never_a_peers_tcp(body: str) -> bool:
    """About loopback, or about another protocol than TCP."""
    if re.search(r'\biif(name)? "?lo"?(\s|$)', body):
        return True
    return bool(re.search(r"\b(udp|icmp|icmpv6|ipv6-icmp|igmp|sctp)\b", body) and not re.search(r"\btcp\b", body))


def _dport(body: str, sets: dict[str, str]) -> tuple[Ranges | None, bool, str]:
    """A `tcp dport` / `th dport` condition: (its ports, whether they are known, the body without it)."""
    m = re.search(r"\b(?:tcp|th) dport (!= )?(\{[^}]*\}|\S+)", body)
    if not m:
        return None, True, body
    found = None if m.group(1) else _nft_ports(m.group(2), sets)
    return found, found is not None, body.replace(m.group(0), " ")


def _has_other_conditions(rest: str, target: str | None) -> bool:
    """Whether anything is left once the known conditions, the noise and the verdict are taken out."""
    for noise in _NOISE:
        rest = re.sub(noise, " ", rest)
    return any(w not in VERDICTS and w != target and w != "tcp" for w in rest.split())


def _nft_rule(line: str, sets: dict[str, str]) -> Rule | None:
    """One rule statement -> Rule; None when it decides nothing (no verdict, continue, queue)."""
    verdict, target = _verdict(line)
    if verdict in ("none", "continue", "queue"):
        return None
    body = re.sub(r"\breject with .*$", "reject", line)
    applies, body = _ct_state_applies(body)
    if _never_a_peers_tcp(body):
        applies = False
    ports, known, body = _dport(body, sets)
    certain = known and not _has_other_conditions(body, target)
    return Rule(verdict, target, ports, applies, certain)


# ------------------------------------------------------------------------------------------------- structure

def _statements(text: str):
    """`nft list ruleset` lines joined into statements: a line with unbalanced '{' (not an opener) continues."""
    pending = ""
    for raw in text.splitlines():
        line = re.sub(r'^((?:[^"#]|"[^"]*")*)#.*$', r"\1", raw).strip()  # '# handle N', '}# Warning: ...'
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}".strip() if pending else line
        opener = re.match(r"(table|chain|set|map|flowtable|counter|quota|limit|ct \S+|secmark|synproxy) .*\{$",
                          pending) and pending.count("{") == 1
        if pending.count("{") > pending.count("}") and not opener:
            continue
        yield pending
        pending = ""
    if pending:
        yield pending


def _hook_policy(kind: str, hook: str, policy: str | None) -> str:
    """A base chain's `type KIND hook HOOK ... policy P;` -> its policy on the filter input hook, else 'other-hook'."""
    return (policy or "accept") if (kind, hook) == ("filter", "input") else "other-hook"


class _Reader:
    """Reads the statements one by one, knowing which table and which chain or set (or other object) it is in."""

    def __init__(self) -> None:
        self.tables: list[tuple[tuple[str, str], dict[str, Chain]]] = []
        self.table: tuple[str, str] | None = None
        self.chains: dict[str, Chain] = {}
        self.sets: dict[str, str] = {}
        self.chain: Chain | None = None
        self.block: list[str] | None = None   # the lines of a set / map / other object of the table
        self.block_name: str | None = None    # the set's name (None: not a set)

    def feed(self, line: str) -> None:
        if self.table is None:
            self._outside(line)
        elif self.block is not None:
            self._in_block(line)
        elif self.chain is not None:
            self._in_chain(line)
        else:
            self._in_table(line)

    def _outside(self, line: str) -> None:
        m = re.match(r"table (\S+) (\S+) \{$", line)
        if m:
            self.table, self.chains, self.sets = (m.group(1), m.group(2)), {}, {}

    def _in_block(self, line: str) -> None:
        if line != "}":
            self.block.append(line)
            return
        if self.block_name:
            m = re.search(r"elements = \{(.*)\}", " ".join(self.block))
            self.sets[self.block_name] = m.group(1) if m else ""
        self.block, self.block_name = None, None

    def _in_chain(self, line: str) -> None:
        if line == "}":
            self.chain = None
            return
        m = re.match(r"type (\S+) hook (\S+) .*?(?:policy (\w+);)?$", line)
        if m:
            self.chain.policy = _hook_policy(*m.groups())
            return
        rule = _nft_rule(line, self.sets)
        if rule:
            self.chain.rules.append(rule)

    def _in_table(self, line: str) -> None:
        if line == "}":
            self.tables.append((self.table, self.chains))
            self.table = None
            return
        m = re.match(r"chain (\S+) \{$", line)
        if m:
            self.chain = Chain(m.group(1), None, [])
            self.chains[self.chain.name] = self.chain
            return
        m = re.match(r"(set|map|flowtable|\S+) (\S+) \{$", line)
        if m:
            self.block, self.block_name = [], m.group(2) if m.group(1) == "set" else None


def _skipped(family: str, name: str, chains: dict, skip: tuple[str, ...]) -> bool:
    """Not an ip / inet table, or one a firewall manager judged here owns (by name, or by a 'PREFIX*' chain)."""
    if family not in ("ip", "inet") or name in skip:
        return True
    prefixes = tuple(s[:-1] for s in skip if s.endswith("*"))
    return bool(prefixes) and any(c.startswith(prefixes) for c in chains)


def parse_nft_ruleset(text: str, skip: tuple[str, ...] = ()) -> list[Table]:
    """`nft list ruleset` -> [(table label, input base chains, all chains by name)] for ip/inet tables.

    A table is skipped when its name is in skip or one of its chains starts with a prefix given as 'PREFIX*'."""
    reader = _Reader()
    for line in _statements(text):
        reader.feed(line)
    out = []
    for (family, name), chains in reader.tables:
        if _skipped(family, name, chains, skip):
            continue
        base = [c for c in chains.values() if c.policy in ("accept", "drop")]
        if base:
            out.append((f"nftables {family} {name}", base, chains))
    return out
