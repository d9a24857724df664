"""ufw and firewalld, judged through their own status output (`ufw status verbose`, `firewall-cmd --list-all-zones`)
rather than through the nftables / iptables rules they generate."""

from __future__ import annotations

import re

from dapo_ops.firewall.ports import Ranges, covers, ranges, span

# ------------------------------------------------------------------------------------------------------- ufw

_SKIP = object()  # a ufw status line that is no rule judged here


def ufw_active(text: str) -> bool:
    return bool(re.search(r"^Status: active", text, re.M))


def _ufw_rule(line: str) -> tuple[Ranges | None, str, str] | object:
    """A `ufw status verbose` rule line -> (TCP ports or None for any, action, from); _SKIP for a header, another
    protocol's rule or an application profile (not judged)."""
    m = re.match(r"(\S+)(?: \(v6\))?\s+(ALLOW|DENY|REJECT|LIMIT)(?: IN)?\s+(.*)$", line.strip())
    if not m or m.group(1) in ("To", "--"):
        return _SKIP
    to, action, source = m.groups()
    if to == "Anywhere":
        return None, action, source
    spec, _, proto = to.partition("/")
    ports = ranges(spec)
    if (proto and proto != "tcp") or ports is None:
        return _SKIP
    return ports, action, source


def ufw_verdict(text: str, port: int) -> str | None:
    """`ufw status verbose` -> 'accept' / 'drop' for port, None when ufw is inactive."""
    if not ufw_active(text):
        return None
    default = re.search(r"^Default: (\w+) \(incoming\)", text, re.M)
    policy = "accept" if default and default.group(1) == "allow" else "drop"
    for line in text.splitlines():
        rule = _ufw_rule(line)
        if rule is _SKIP:
            continue
        ports, action, source = rule
        if ports is not None and not covers(ports, port):
            continue
        if action in ("ALLOW", "LIMIT"):
            return "accept"
        if source.strip().startswith("Anywhere"):
            return "drop"
    return policy


# ------------------------------------------------------------------------------------------------- firewalld

def _zone_verdict(list_all: str, port: int) -> str:
    """One zone's block of `firewall-cmd --list-all(-zones)` -> 'accept' (target ACCEPT, or a tcp port it opens)
    or 'drop'."""
    target = re.search(r"^\s*target: (\S+)", list_all, re.M)
    if target and target.group(1).upper() == "ACCEPT":
        return "accept"
    open_ports = re.search(r"^\s*ports: (.*)$", list_all, re.M)
    for item in (open_ports.group(1).split() if open_ports else []):
        spec, _, proto = item.partition("/")
        found = span(spec) if proto == "tcp" else None
        if found and found[0] <= port <= found[1]:
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


def firewalld_verdict(zones: dict[str, str], port: int) -> str:
    """Traffic from the cluster's peers enters the zone bound to its NIC or source, which the node's outputs do not
    say: a port any zone that takes traffic accepts is not reported (no false alarm stops a host)."""
    return "accept" if any(_zone_verdict(body, port) == "accept" for body in zones.values()) else "drop"
