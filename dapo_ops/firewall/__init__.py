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

Modules: ports (port specs and ranges), chains (the rule model and the walk of a chain), nft (`nft list ruleset`),
iptables (`iptables-save`), managers (ufw, firewalld), verdict (which wanted ports each firewall drops).
"""

from dapo_ops.firewall.ports import format_ranges, parse_port_map, parse_port_spec
from dapo_ops.firewall.verdict import Blocked, blocked_ports, firewall_problems

__all__ = ["Blocked", "blocked_ports", "firewall_problems", "format_ranges", "parse_port_map", "parse_port_spec"]
