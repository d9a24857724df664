"""Parsers of hccn_tool's output for one NPU NIC: -link, -net_health, -ip, -gateway, -netdetect and -ping (``-g``).

Each takes the raw text (and the command it came from, for the error) and returns the reading; malformed or
truncated output raises ``ParseError`` naming the command.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from dapo_ops.errors import ParseError

UNSET = ("", "0.0.0.0")  # what an unset gateway / netdetect address reads back as


def _single_line(text: str, command: str, prefix: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    for line_no, line in enumerate(lines, 1):
        if line.strip().lower().startswith(prefix):
            return line.split(":", 1)[1].strip()
    if not lines:
        raise ParseError(command, "empty output")
    raise ParseError(command, f"expected '{prefix}: ...'", 1, lines[0])


def parse_hccn_link(text: str, command: str = "hccn_tool -i N -link -g") -> str:
    """'link status: UP' -> 'UP'."""
    value = _single_line(text, command, "link status")
    if value not in ("UP", "DOWN"):
        raise ParseError(command, f"unknown link status {value!r}")
    return value


def parse_hccn_net_health(text: str, command: str = "hccn_tool -i N -net_health -g") -> str:
    """'net health status: Success' -> 'Success' (other states: Fault, ...)."""
    value = _single_line(text, command, "net health status")
    if not value:
        raise ParseError(command, "empty net health status")
    return value


@dataclass(frozen=True)
class HccnIp:
    address: str | None
    netmask: str | None

    @property
    def configured(self) -> bool:
        return self.address is not None


_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


def parse_hccn_ip(text: str, command: str = "hccn_tool -i N -ip -g") -> HccnIp:
    """'ipaddr:A' + 'netmask:M', or 'Get ipconf failed, because no ip was preset there!' (no address)."""
    address = netmask = None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError(command, "empty output")
    for line_no, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("Get ipconf failed"):
            return HccnIp(None, None)
        key, sep, value = stripped.partition(":")
        if not sep:
            raise ParseError(command, "expected 'ipaddr:' or 'netmask:'", line_no, line)
        value = value.strip()
        if key == "ipaddr":
            address = value
        elif key == "netmask":
            netmask = value
        else:
            raise ParseError(command, f"unexpected key {key!r}", line_no, line)
        if not _IPV4.match(value):
            raise ParseError(command, f"{key} is not an IPv4 address", line_no, line)
    if address is None or netmask is None:
        raise ParseError(command, "truncated: need both ipaddr and netmask")
    return HccnIp(address, netmask)


def _value_after(text: str, command: str, prefix: str) -> tuple[str, int, str]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError(command, "empty output")
    for line_no, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.lower().startswith(prefix):
            return stripped[len(prefix):].lstrip(" :").strip(), line_no, line
    raise ParseError(command, f"expected '{prefix}...'", 1, lines[0])


def _address_or_none(value: str, command: str, line_no: int, line: str) -> str | None:
    if value in UNSET:
        return None
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        raise ParseError(command, f"{value!r} is not an IPv4 address", line_no, line) from None


def parse_hccn_gateway(text: str, command: str = "hccn_tool -i N -gateway -g") -> str | None:
    """'default gateway:10.20.1.1, Iface:eth0' -> '10.20.1.1'; no gateway (empty or 0.0.0.0) -> None."""
    value, line_no, line = _value_after(text, command, "default gateway")
    return _address_or_none(value.split(",", 1)[0].strip(), command, line_no, line)


def parse_hccn_netdetect(text: str, command: str = "hccn_tool -i N -netdetect -g") -> str | None:
    """'netdetect address: 10.20.1.1' -> '10.20.1.1'; unset (empty or 0.0.0.0) -> None."""
    value, line_no, line = _value_after(text, command, "netdetect address")
    return _address_or_none(value, command, line_no, line)


@dataclass(frozen=True)
class HccnPing:
    target: str
    transmitted: int
    received: int
    loss: str  # as printed, e.g. '0.00%'

    @property
    def ok(self) -> bool:
        return self.transmitted > 0 and self.received == self.transmitted


_PING_HEAD = re.compile(r"^device (\d+) PING (\S+)$")
_PING_SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received, ([\d.]+%) packet loss$")


def parse_hccn_ping(text: str, command: str = "hccn_tool -i N -ping -g address A") -> HccnPing:
    """``hccn_tool -i N -ping -g address A``.

    Success (ascend.md §3.3, public sample): 'device 3 PING A', three 'recv seq=K,time=Tms' lines,
    '3 packets transmitted, 3 received, 0.00% packet loss'. Lost packets print 'recv time out seq=K' and the
    summary counts them ('3 packets transmitted, 2 received, 33.33% packet loss' in Huawei's public MindIE
    multi-node guide; '3 packets transmitted, 0 received, 100.00% packet loss' is what Huawei's MindCluster
    troubleshooting guide names as a broken RoCE network between two nodes).
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError(command, "empty output")
    target = None
    for line_no, line in enumerate(lines, 1):
        head = _PING_HEAD.match(line)
        if head:
            target = head.group(2)
            continue
        summary = _PING_SUMMARY.match(line)
        if summary:
            if target is None:
                raise ParseError(command, "summary before the 'device N PING A' line", line_no, line)
            return HccnPing(target, int(summary.group(1)), int(summary.group(2)), summary.group(3))
        if not (line.startswith("recv seq=") or line.startswith("recv time out")):
            raise ParseError(command, "unexpected line", line_no, line)
    raise ParseError(command, "truncated: no 'N packets transmitted, ...' summary")
