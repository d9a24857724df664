"""Parsers of hccn_tool's output for one NPU NIC: -link, -net_health, -ip, -gateway, -netdetect, -tls and -ping
(``-g``).

Each takes the raw text (and the command it came from, for the error) and returns the reading; malformed or
truncated output raises ``ParseError`` naming the command. These are the readings vllm-ascend's multi-node
tutorial checks on every node before a launch (vllm-project/vllm-ascend, docs/source/tutorials/multi_node.md,
"Verify Multi-Node Communication Environment"); sample outputs are in tests/unit/test_hccn_tool.py.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from dapo_ops.ascend.where import Where

UNSET = ("", "0.0.0.0")  # what an unset gateway / netdetect address reads back as
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_PING_HEAD = re.compile(r"^device (\d+) PING (\S+)$")
_PING_SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received, ([\d.]+%) packet loss$")


def _nonblank(text: str, where: Where) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        where.fail("empty output")
    return lines


def _line_starting(text: str, where: Where, prefix: str, expected: str) -> tuple[str, Where]:
    """The first line starting with `prefix` (in any case), stripped, and where it is (its number among the
    non-blank lines). None such: ParseError "expected '<expected>'" showing the first line."""
    lines = _nonblank(text, where)
    for line_no, line in enumerate(lines, 1):
        if line.strip().lower().startswith(prefix):
            return line.strip(), where.at(line_no, line)
    where.at(1, lines[0]).fail(f"expected '{expected}'")


def _status(text: str, where: Where, prefix: str) -> str:
    """The value of the '<prefix>: <value>' line."""
    line, at = _line_starting(text, where, prefix, f"{prefix}: ...")
    _, colon, value = line.partition(":")
    if not colon:
        at.fail(f"expected '{prefix}: ...'")
    return value.strip()


def parse_hccn_link(text: str, command: str = "hccn_tool -i N -link -g") -> str:
    """'link status: UP' -> 'UP'."""
    where = Where(command)
    value = _status(text, where, "link status")
    if value not in ("UP", "DOWN"):
        where.fail(f"unknown link status {value!r}")
    return value


def parse_hccn_net_health(text: str, command: str = "hccn_tool -i N -net_health -g") -> str:
    """'net health status: Success' -> 'Success' (other states: Fault, ...)."""
    where = Where(command)
    value = _status(text, where, "net health status")
    if not value:
        where.fail("empty net health status")
    return value


@dataclass(frozen=True)
class HccnIp:
    address: str | None
    netmask: str | None

    @property
    def configured(self) -> bool:
        return self.address is not None


def parse_hccn_ip(text: str, command: str = "hccn_tool -i N -ip -g") -> HccnIp:
    """'ipaddr:A' + 'netmask:M', or 'Get ipconf failed, because no ip was preset there!' (no address)."""
    address = netmask = None
    for line_no, line in enumerate(_nonblank(text, Where(command)), 1):
        where = Where(command, line_no, line)
        stripped = line.strip()
        if stripped.startswith("Get ipconf failed"):
            return HccnIp(None, None)
        key, sep, value = stripped.partition(":")
        if not sep:
            where.fail("expected 'ipaddr:' or 'netmask:'")
        value = value.strip()
        if key == "ipaddr":
            address = value
        elif key == "netmask":
            netmask = value
        else:
            where.fail(f"unexpected key {key!r}")
        if not _IPV4.match(value):
            where.fail(f"{key} is not an IPv4 address")
    if address is None or netmask is None:
        Where(command).fail("truncated: need both ipaddr and netmask")
    return HccnIp(address, netmask)


def _address_or_none(value: str, where: Where) -> str | None:
    if value in UNSET:
        return None
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        where.fail(f"{value!r} is not an IPv4 address")


def parse_hccn_gateway(text: str, command: str = "hccn_tool -i N -gateway -g") -> str | None:
    """'default gateway:10.20.1.1, Iface:eth0' -> '10.20.1.1'; no gateway (empty or 0.0.0.0) -> None."""
    line, where = _line_starting(text, Where(command), "default gateway", "default gateway...")
    value = line[len("default gateway"):].lstrip(" :").strip()
    return _address_or_none(value.split(",", 1)[0].strip(), where)


def parse_hccn_netdetect(text: str, command: str = "hccn_tool -i N -netdetect -g") -> str | None:
    """'netdetect address: 10.20.1.1' -> '10.20.1.1'; unset (empty or 0.0.0.0) -> None."""
    line, where = _line_starting(text, Where(command), "netdetect address", "netdetect address...")
    return _address_or_none(line[len("netdetect address"):].lstrip(" :").strip(), where)


@dataclass(frozen=True)
class HccnPing:
    target: str
    transmitted: int
    received: int
    loss: str  # as printed, e.g. '0.00%'

    @property
    def ok(self) -> bool:
        return self.transmitted > 0 and self.received == self.transmitted


def parse_hccn_ping(text: str, command: str = "hccn_tool -i N -ping -g address A") -> HccnPing:
    """``hccn_tool -i N -ping -g address A``.

    Success: 'device 3 PING A', three 'recv seq=K,time=Tms' lines,
    '3 packets transmitted, 3 received, 0.00% packet loss'. Lost packets print 'recv time out seq=K' and the
    summary counts them ('3 packets transmitted, 2 received, 33.33% packet loss' in Huawei's public MindIE
    multi-node guide; '3 packets transmitted, 0 received, 100.00% packet loss' is what Huawei's MindCluster
    troubleshooting guide names as a broken RoCE network between two nodes).
    """
    target = None
    for line_no, line in enumerate((line.strip() for line in _nonblank(text, Where(command))), 1):
        where = Where(command, line_no, line)
        head = _PING_HEAD.match(line)
        if head:
            target = head.group(2)
            continue
        summary = _PING_SUMMARY.match(line)
        if summary:
            if target is None:
                where.fail("summary before the 'device N PING A' line")
            return HccnPing(target, int(summary.group(1)), int(summary.group(2)), summary.group(3))
        if not (line.startswith("recv seq=") or line.startswith("recv time out")):
            where.fail("unexpected line")
    Where(command).fail("truncated: no 'N packets transmitted, ...' summary")


_TLS_SWITCH = re.compile(r"\btls[ _]switch\s*(?:\[\s*([01])\s*\]|[:=]\s*([01])\b)", re.IGNORECASE)


def parse_hccn_tls(text: str, command: str = "hccn_tool -i N -tls -g") -> bool:
    """The NPU NIC's TLS switch (True: on) from the 'tls switch[N]' (or 'tls switch:N') field of -tls -g, as the
    public sample in Ascend/mind-cluster docs/en/faultdiag/user_guide/03_collecting_logs.md prints it
    (docs/ascend-formats.md §3.3); the rest of the line (preconfigured certificates, alarm threshold) is not read."""
    where = Where(command)
    lines = _nonblank(text, where)
    for line_no, line in enumerate(lines, 1):
        found = _TLS_SWITCH.search(line)
        if found:
            return (found.group(1) or found.group(2)) == "1"
    where.at(1, lines[0]).fail("expected 'tls switch[0|1]'")
