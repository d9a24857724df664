"""Would the node's host firewall drop Ray's or HCCL's incoming TCP connections? (pure; no I/O)

The node-side module (library/dapo_node_facts.py) returns the raw output of `nft list ruleset`, `iptables-save`,
`ufw status verbose` and `firewall-cmd --state` / `--list-all-zones` (rc 127 when a tool is absent); this module judges,
for every wanted port, whether a NEW TCP connection from a peer node would get through the input path.

The model, deliberately small and on the side of not crying wolf:
- nftables: every base chain on the `input` hook of an `ip` or `inet` table, and iptables' `INPUT` chain of the
  `filter` table, is walked rule by rule (following `jump` / `goto` into regular chains). A rule matches a port when
  its conditions are about that port (`tcp dport`, `th dport`, `--dport`, `--dports`, sets and ranges), about TCP,
  or about new connections; it never matches when it is about loopback, established/related/invalid connections,
  UDP or ICMP. Any other condition (a source address, an input interface, a mark...) is not known here: an accept
  under it is counted as accepting (the peer may well be in that subnet), a drop under it as not dropping.
  The first accept/drop/reject decides; the chain's policy decides when no rule did. Any base chain dropping is
  enough (a packet must pass every input chain).
- ufw (when `Status: active`): the default incoming policy and the ALLOW/DENY/REJECT rules of `ufw status verbose`.
  ufw's own iptables/nftables chains (`ufw-*`) are judged through ufw, not rule by rule.
- firewalld (when `firewall-cmd --state` says `running`): the target and `ports:` of every zone that takes traffic
  (active or default) in `firewall-cmd --list-all-zones`; a port one of them accepts is not reported, since which
  zone the peers' traffic enters (the HCCL NIC's, or a source's) is not known here. Services and rich rules are not
  judged. Its `inet firewalld` table is judged through firewalld.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from dapo_ops.errors import InventoryError

Ranges = tuple[tuple[int, int], ...]


# ----------------------------------------------------------------------------------------------- port specs

_SPAN = re.compile(r"(\d{1,5})(?:\s*[-:]\s*(\d{1,5}))?")


def _span(text: str) -> tuple[int, int] | None:
    """'6379', '10002-19999' or '10002:19999' -> (first, last); None when it is not that or out of 1-65535."""
    m = _SPAN.fullmatch(text.strip())
    if not m:
        return None
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    return (first, last) if 1 <= first <= last <= 65535 else None


def parse_port_spec(spec: object, what: str = "port") -> tuple[int, int]:
    """6379, "6379" or "10002-19999" (also "10002:19999") -> (first, last); InventoryError on anything else."""
    text = str(spec).strip() if isinstance(spec, (int, str)) and not isinstance(spec, bool) else ""
    if not _SPAN.fullmatch(text):
        raise InventoryError(f"{what}: {spec!r} is not a port or a range FIRST-LAST")
    span = _span(text)
    if span is None:
        raise InventoryError(f"{what}: {spec!r} is not within 1-65535 with FIRST <= LAST")
    return span


def parse_port_map(ports: object, what: str) -> dict[str, tuple[int, int]]:
    """{name: port or "first-last"} as the inventory gives it -> {name: (first, last)}."""
    if not isinstance(ports, dict) or not ports:
        raise InventoryError(f"{what} must be a mapping of name -> port or FIRST-LAST, got {ports!r}")
    return {str(name): parse_port_spec(spec, f"{what}.{name}") for name, spec in ports.items()}


def format_ranges(ranges: list[tuple[int, int]]) -> str:
    """[(6379, 6379), (10002, 10003), (10004, 10010)] -> '6379, 10002-10010' (adjacent ranges joined)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and out[-1][1] >= a - 1:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


# ---------------------------------------------------------------------------------------------- rule model

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


def _ranges(text: str) -> Ranges | None:
    """'6379', '6379,8265', '10002:19999' -> ranges; None when any item is not a port or a range."""
    spans = [_span(item) for item in re.split(r"[\s,]+", text) if item]
    return None if not spans or None in spans else tuple(spans)


_VERDICTS = ("accept", "drop", "reject", "return", "jump", "goto", "continue", "queue")
_SERVICES = {"ssh": 22, "http": 80, "https": 443, "domain": 53, "ntp": 123, "smtp": 25}


def _nft_ports(spec: str, sets: dict[str, str]) -> Ranges | None:
    """A dport operand -> ranges; None when it is not known here (a set not found, an unknown service name)."""
    if spec.startswith("@"):
        spec = sets.get(spec[1:], "")
        if not spec:
            return None
    words = [w for w in re.split(r"[\s,{}]+", spec) if w]
    out = []
    for word in words:
        if word in _SERVICES:
            out.append((_SERVICES[word], _SERVICES[word]))
            continue
        span = _span(word)
        if span is None:
            return None
        out.append(span)
    return tuple(out)


def _nft_rule(line: str, sets: dict[str, str]) -> Rule | None:
    words = line.split()
    verdict, target = "none", None
    for i, word in enumerate(words):
        if word in _VERDICTS:
            verdict = word
            target = words[i + 1] if word in ("jump", "goto") and i + 1 < len(words) else None
            break
    if verdict in ("none", "continue", "queue"):
        return None
    body = re.sub(r"\breject with .*$", "reject", line)
    applies, certain, ports = True, True, None
    ct = re.search(r"\bct state (?:\{([^}]*)\}|(\S+))", body)
    if ct:
        states = {s.strip() for s in re.split(r"[,\s]+", ct.group(1) or ct.group(2)) if s.strip()}
        if "new" not in states:
            applies = False
        body = body.replace(ct.group(0), " ")
    if re.search(r'\biif(name)? "?lo"?(\s|$)', body):
        applies = False
    if re.search(r"\b(udp|icmp|icmpv6|ipv6-icmp|igmp|sctp)\b", body) and not re.search(r"\btcp\b", body):
        applies = False
    m = re.search(r"\b(?:tcp|th) dport (!= )?(\{[^}]*\}|\S+)", body)
    if m:
        found = None if m.group(1) else _nft_ports(m.group(2), sets)
        if found is None:
            certain = False
        else:
            ports = found
        body = body.replace(m.group(0), " ")
    rest = re.sub(r"\b(meta l4proto|ip protocol) (tcp|\{ ?tcp ?\})", " ", body)
    rest = re.sub(r"\bcounter( packets \d+ bytes \d+)?", " ", rest)
    rest = re.sub(r'\blog( prefix "[^"]*")?( level \S+)?( flags \S+)?', " ", rest)
    rest = re.sub(r'\bcomment "[^"]*"', " ", rest)
    rest = re.sub(r"\s*#.*$", " ", rest)
    leftover = [w for w in rest.split() if w not in _VERDICTS and w != target and w != "tcp"]
    if leftover:
        certain = False
    return Rule(verdict, target, ports, applies, certain)


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


def parse_nft_ruleset(text: str, skip: tuple[str, ...] = ()) -> list[tuple[str, list[Chain], dict]]:
    """`nft list ruleset` -> [(table label, input base chains, all chains by name)] for ip/inet tables.

    A table is skipped when its name is in skip or one of its chains starts with a prefix given as 'PREFIX*'."""
    tables = []
    table, chains, sets, chain, block, block_name = None, {}, {}, None, None, None
    for line in _statements(text):
        if table is None:
            m = re.match(r"table (\S+) (\S+) \{$", line)
            if m:
                table, chains, sets = (m.group(1), m.group(2)), {}, {}
            continue
        if block is not None:  # inside a set / map / other object of the table
            if line == "}":
                if block_name:
                    m = re.search(r"elements = \{(.*)\}", " ".join(block))
                    sets[block_name] = m.group(1) if m else ""
                block, block_name = None, None
            else:
                block.append(line)
            continue
        if chain is not None:
            if line == "}":
                chain = None
                continue
            m = re.match(r"type (\S+) hook (\S+) .*?(?:policy (\w+);)?$", line)
            if m:
                chain.policy = (m.group(3) or "accept") if (m.group(1), m.group(2)) == ("filter", "input") \
                    else "other-hook"
                continue
            rule = _nft_rule(line, sets)
            if rule:
                chain.rules.append(rule)
            continue
        if line == "}":
            tables.append((table, chains))
            table = None
            continue
        m = re.match(r"chain (\S+) \{$", line)
        if m:
            chain = Chain(m.group(1), None, [])
            chains[chain.name] = chain
            continue
        m = re.match(r"(set|map|flowtable|\S+) (\S+) \{$", line)
        if m:
            block, block_name = [], m.group(2) if m.group(1) == "set" else None
    out = []
    prefixes = tuple(s[:-1] for s in skip if s.endswith("*"))
    for (family, name), chains in tables:
        if family not in ("ip", "inet") or name in skip:
            continue
        if prefixes and any(c.startswith(prefixes) for c in chains):
            continue
        base = [c for c in chains.values() if c.policy in ("accept", "drop")]
        if base:
            out.append((f"nftables {family} {name}", base, chains))
    return out


def _ipt_rule(args: list[str]) -> Rule | None:
    opts: dict[str, list[str]] = {}
    i = 0
    negated = False
    while i < len(args):
        word = args[i]
        if word == "!":
            negated = True
            i += 1
            continue
        if word.startswith("-"):
            values = []
            j = i + 1
            while j < len(args) and not args[j].startswith("-") and args[j] != "!":
                values.append(args[j])
                j += 1
            opts.setdefault(word, []).append(("!" if negated else "") + " ".join(values))
            negated = False
            i = j
        else:
            i += 1
    jump, goto = opts.pop("-j", None), opts.pop("-g", None)
    target = (jump or goto or [None])[0]
    if target is None:
        return None
    verdict = {"ACCEPT": "accept", "DROP": "drop", "REJECT": "reject", "RETURN": "return"}.get(target)
    if verdict is None:
        if target in ("LOG", "NFLOG", "ULOG", "MARK", "CONNMARK", "CT", "NOTRACK", "TRACE", "AUDIT"):
            return None
        verdict = "goto" if goto else "jump"
    applies, certain, ports = True, True, None
    for key in ("--state", "--ctstate"):
        for value in opts.pop(key, []):
            if "NEW" not in value.upper().split(","):
                applies = False
    for value in opts.pop("-i", []):
        if value == "lo":
            applies = False
        else:
            certain = False
    proto = opts.pop("-p", [""])[0].lower()
    if proto and proto not in ("tcp", "6", "all"):
        applies = False
    opts.pop("-m", None)
    opts.pop("--comment", None)
    opts.pop("--reject-with", None)
    for key in ("--dport", "--destination-port", "--dports", "--destination-ports"):
        for value in opts.pop(key, []):
            if value.startswith("!"):
                certain = False
                continue
            ports = _ranges(value)
            if ports is None:
                certain = False
    if opts:
        certain = False
    return Rule(verdict, target if verdict in ("jump", "goto") else None, ports, applies, certain)


def parse_iptables_save(text: str, skip_prefixes: tuple[str, ...] = ()) -> list[tuple[str, list[Chain], dict]]:
    """`iptables-save` -> [("iptables filter", [INPUT], chains)] (empty when there is no filter table)."""
    chains: dict[str, Chain] = {}
    in_filter = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            in_filter = line == "*filter"
            continue
        if not in_filter or not line or line.startswith("#"):
            continue
        if line.startswith(":"):
            name, policy = line[1:].split()[:2]
            chains[name] = Chain(name, policy.lower() if policy != "-" else None, [])
            continue
        if line.startswith("-A "):
            args = shlex.split(line)
            chain = chains.setdefault(args[1], Chain(args[1], None, []))
            rule = _ipt_rule(args[2:])
            if rule:
                chain.rules.append(rule)
    if "INPUT" not in chains:
        return []
    if skip_prefixes and any(name.startswith(skip_prefixes) for name in chains):
        return []
    return [("iptables filter", [chains["INPUT"]], chains)]


def _walk(chain: Chain, chains: dict, port: int, seen: tuple = ()) -> str | None:
    """The verdict a new TCP connection to port gets in chain: 'accept', 'drop' or None (falls through)."""
    for rule in chain.rules:
        if not rule.applies:
            continue
        if rule.ports is not None and not any(a <= port <= b for a, b in rule.ports):
            continue
        if rule.verdict in ("jump", "goto"):
            sub = chains.get(rule.target)
            if sub is None or sub.name in seen:
                continue
            verdict = _walk(sub, chains, port, seen + (chain.name,))
            if verdict == "accept" or (verdict == "drop" and rule.certain):
                return verdict
            if rule.verdict == "goto" and rule.certain:
                return None
            continue
        if rule.verdict == "return":
            if rule.certain:
                return None
            continue
        if rule.verdict == "accept":
            return "accept"
        if rule.certain:  # drop / reject
            return "drop"
    return None


# ------------------------------------------------------------------------------------------ ufw, firewalld

def _ufw(text: str, port: int) -> str | None:
    """`ufw status verbose` -> 'accept' / 'drop' for port, None when ufw is inactive."""
    if not re.search(r"^Status: active", text, re.M):
        return None
    default = re.search(r"^Default: (\w+) \(incoming\)", text, re.M)
    policy = "accept" if default and default.group(1) == "allow" else "drop"
    for line in text.splitlines():
        m = re.match(r"(\S+)(?: \(v6\))?\s+(ALLOW|DENY|REJECT|LIMIT)(?: IN)?\s+(.*)$", line.strip())
        if not m or m.group(1) in ("To", "--"):
            continue
        to, action = m.group(1), m.group(2)
        if to == "Anywhere":
            ports = None
        else:
            spec, _, proto = to.partition("/")
            if proto and proto != "tcp":
                continue
            ports = _ranges(spec)
            if ports is None:
                continue  # an application profile name: not judged
        if ports is not None and not any(a <= port <= b for a, b in ports):
            continue
        if action in ("ALLOW", "LIMIT"):
            return "accept"
        if m.group(3).strip().startswith("Anywhere"):
            return "drop"
    return policy


def _firewalld(list_all: str, port: int) -> str:
    target = re.search(r"^\s*target: (\S+)", list_all, re.M)
    if target and target.group(1).upper() == "ACCEPT":
        return "accept"
    open_ports = re.search(r"^\s*ports: (.*)$", list_all, re.M)
    for item in (open_ports.group(1).split() if open_ports else []):
        spec, _, proto = item.partition("/")
        span = _span(spec) if proto == "tcp" else None
        if span and span[0] <= port <= span[1]:
            return "accept"
    return "drop"


def firewalld_zones(text: str) -> dict[str, str]:
    """`firewall-cmd --list-all-zones` (or `--list-all`) -> the zones that take traffic (marked active or default;
    for `--list-all`, its one zone), name -> that zone's block."""
    blocks: dict[str, tuple[str, str]] = {}
    name = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            head = line.split()
            name = head[0]
            blocks[name] = (line[len(name):], "")
        elif name is not None:
            marks, body = blocks[name]
            blocks[name] = (marks, body + line + "\n")
    if len(blocks) == 1:
        return {n: body for n, (_, body) in blocks.items()}
    return {n: body for n, (marks, body) in blocks.items() if "active" in marks or "default" in marks}


def _firewalld_zones(zones: dict[str, str], port: int) -> str:
    """Traffic from the cluster's peers enters the zone bound to its NIC or source, which the node's outputs do not
    say: a port any zone that takes traffic accepts is not reported (no false alarm stops a host)."""
    return "accept" if any(_firewalld(body, port) == "accept" for body in zones.values()) else "drop"


# ----------------------------------------------------------------------------------------------- verdicts

@dataclass(frozen=True)
class Blocked:
    source: str                  # e.g. "nftables inet filter (chain input, policy drop)"
    ports: dict[str, list[tuple[int, int]]]  # wanted name -> blocked ranges


def _out(outputs: dict, name: str) -> str | None:
    entry = outputs.get(name) or {}
    return entry.get("stdout") if entry.get("rc") == 0 else None


def blocked_ports(outputs: dict, wanted: dict[str, tuple[int, int]]) -> list[Blocked]:
    """Raw command outputs ({name: {rc, stdout}} for nft, iptables, ufw, firewalld_state, firewalld) and the
    wanted ports ({label: (first, last)}) -> what each active firewall would drop (empty: nothing blocked)."""
    judges = []  # (source label, fn(port) -> 'accept' | 'drop' | None)
    ufw_text = _out(outputs, "ufw") or ""
    ufw_active = bool(re.search(r"^Status: active", ufw_text, re.M))
    firewalld_running = (_out(outputs, "firewalld_state") or "").strip() == "running"
    skip = (("ufw-*",) if ufw_active else ()) + (("firewalld",) if firewalld_running else ())
    if ufw_active:
        judges.append(("ufw (default incoming policy and rules)", lambda p: _ufw(ufw_text, p)))
    if firewalld_running:
        zones = firewalld_zones(_out(outputs, "firewalld") or "")
        judges.append((f"firewalld (zone{'s' if len(zones) > 1 else ''} {', '.join(zones) or '?'})",
                       lambda p: _firewalld_zones(zones, p)))
    parsed = []
    nft_text = _out(outputs, "nft")
    if nft_text:
        parsed += parse_nft_ruleset(nft_text, skip)
    ipt_text = _out(outputs, "iptables")
    if ipt_text and nft_text is not None and "(nf_tables)" in ipt_text.split("\n", 1)[0]:
        ipt_text = None  # iptables-nft: the same rules as nft's, already judged
    if ipt_text:
        parsed += parse_iptables_save(ipt_text, tuple(s[:-1] for s in skip if s.endswith("*")))
    for label, bases, chains in parsed:
        for base in bases:
            def judge(p, base=base, chains=chains):
                return _walk(base, chains, p) or base.policy
            judges.append((f"{label} (chain {base.name}, policy {base.policy})", judge))
    # A verdict can only change at a port some rule names: judge one port per segment between those numbers.
    numbers = {int(n) for text in (nft_text, ipt_text, ufw_text, _out(outputs, "firewalld"))
               for n in re.findall(r"\d+", text or "") if 0 < int(n) <= 65535} | set(_SERVICES.values())
    cuts = sorted({n for n in numbers} | {n + 1 for n in numbers})

    def segments(first: int, last: int):
        inner = [c for c in cuts if first < c <= last]
        starts = [first, *inner]
        return [(a, b - 1) for a, b in zip(starts, [*inner, last + 1])]

    result = []
    for source, judge in judges:
        blocked = {name: [(a, b) for a, b in segments(first, last) if judge(a) == "drop"]
                   for name, (first, last) in wanted.items()}
        blocked = {name: ranges for name, ranges in blocked.items() if ranges}
        if blocked:
            result.append(Blocked(source, blocked))
    return result


def firewall_problems(outputs: dict, ray_ports: object, hccl_ports: object) -> list[str]:
    """One line per blocking firewall, naming the ports; InventoryError for a bad port map."""
    wanted = {f"Ray {k}": v for k, v in parse_port_map(ray_ports, "dapo_ray_ports").items()}
    wanted.update({f"HCCL {k}": v for k, v in parse_port_map(hccl_ports, "dapo_hccl_ports").items()})
    return [f"{b.source} drops incoming TCP to "
            + "; ".join(f"{name} {format_ranges(ranges)}" for name, ranges in b.ports.items())
            for b in blocked_ports(outputs, wanted)]
