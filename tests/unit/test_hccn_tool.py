"""The hccn_tool output parsers: -link, -net_health, -ip, -gateway, -netdetect and -ping."""

import pytest

from dapo_ops.ascend import hccn_tool
from dapo_ops.errors import ParseError

from .mangle import mangled

# hccn_tool -i 3 -ping -g address 29.1.137.205 answered; then one whose peer never answers
PING_OK = """device 3 PING 29.1.137.205
recv seq=0,time=1.418000ms
recv seq=1,time=0.034000ms
recv seq=2,time=0.040000ms
3 packets transmitted, 3 received, 0.00% packet loss
"""
PING_LOST = """device 0 PING 10.20.2.11
recv time out seq=0
recv time out seq=1
recv time out seq=2
3 packets transmitted, 0 received, 100.00% packet loss
"""


def test_hccn_tool_outputs():
    assert hccn_tool.parse_hccn_link("link status: UP\n") == "UP"
    assert hccn_tool.parse_hccn_link("link status: DOWN") == "DOWN"
    assert hccn_tool.parse_hccn_net_health("net health status: Success\n") == "Success"
    assert hccn_tool.parse_hccn_net_health("net health status: Fault\n") == "Fault"
    ip = hccn_tool.parse_hccn_ip("ipaddr:10.86.1.80\nnetmask:255.255.255.0\n")
    assert (ip.address, ip.netmask, ip.configured) == ("10.86.1.80", "255.255.255.0", True)
    missing = hccn_tool.parse_hccn_ip("Get ipconf failed, because no ip was preset there!\n")
    assert not missing.configured


@pytest.mark.parametrize("parser, text, reason", [
    (hccn_tool.parse_hccn_link, "", "empty output"),
    (hccn_tool.parse_hccn_link, "link status: SIDEWAYS", "unknown link status"),
    (hccn_tool.parse_hccn_link, "device id 9 is invalid", "expected 'link status"),
    (hccn_tool.parse_hccn_link, "link status UP", "expected 'link status: ...'"),
    (hccn_tool.parse_hccn_net_health, "net health status Success", "expected 'net health status: ...'"),
    (hccn_tool.parse_hccn_net_health, "net health status:", "empty net health"),
    (hccn_tool.parse_hccn_ip, "ipaddr:10.86.1.80\n", "truncated"),
    (hccn_tool.parse_hccn_ip, "ipaddr:not-an-ip\nnetmask:255.255.255.0", "not an IPv4"),
    (hccn_tool.parse_hccn_ip, "hello", "expected 'ipaddr:'"),
])
def test_hccn_tool_malformed(parser, text, reason):
    with pytest.raises(ParseError, match=reason):
        parser(text)


def test_gateway_and_netdetect_parsers():
    assert hccn_tool.parse_hccn_gateway("default gateway:10.20.1.1, Iface:eth0\n") == "10.20.1.1"
    assert hccn_tool.parse_hccn_gateway("default gateway:, Iface:eth3") is None
    assert hccn_tool.parse_hccn_gateway("default gateway:0.0.0.0, Iface:eth3") is None
    assert hccn_tool.parse_hccn_netdetect("netdetect address: 10.20.1.1") == "10.20.1.1"
    assert hccn_tool.parse_hccn_netdetect("netdetect address: ") is None
    with pytest.raises(ParseError, match="gateway -g` output.*expected 'default gateway"):
        hccn_tool.parse_hccn_gateway("dcmi module initialize failed. ret is -8005")
    with pytest.raises(ParseError, match="not an IPv4 address"):
        hccn_tool.parse_hccn_netdetect("netdetect address: 10.20.1")
    with pytest.raises(ParseError, match="empty output"):
        hccn_tool.parse_hccn_gateway("")


def test_ping_parser():
    ok = hccn_tool.parse_hccn_ping(PING_OK)
    assert (ok.target, ok.transmitted, ok.received, ok.loss, ok.ok) == ("29.1.137.205", 3, 3, "0.00%", True)
    lost = hccn_tool.parse_hccn_ping(PING_LOST)
    assert (lost.received, lost.loss, lost.ok) == (0, "100.00%", False)
    partial = hccn_tool.parse_hccn_ping("device 0 PING 10.10.100.10\nrecv time out seq=0\nrecv seq=1,time=0.097000ms\n"
                                        "recv seq=2,time=0.066000ms\n"
                                        "3 packets transmitted, 2 received, 33.33% packet loss\n")
    assert not partial.ok and partial.loss == "33.33%"
    with pytest.raises(ParseError, match="truncated"):
        hccn_tool.parse_hccn_ping("device 0 PING 10.20.2.11\nrecv seq=0,time=0.1ms\n")
    with pytest.raises(ParseError, match="unexpected line"):
        hccn_tool.parse_hccn_ping("device 0 PING 10.20.2.11\nping: bad address\n")


@pytest.mark.parametrize("parser, sample", [
    (hccn_tool.parse_hccn_link, "link status: UP\n"),
    (hccn_tool.parse_hccn_net_health, "net health status: Success\n"),
    (hccn_tool.parse_hccn_ip, "ipaddr:10.86.1.80\nnetmask:255.255.255.0\n"),
    (hccn_tool.parse_hccn_gateway, "default gateway:10.20.1.1, Iface:eth0\n"),
    (hccn_tool.parse_hccn_netdetect, "netdetect address: 10.20.1.1\n"),
    (hccn_tool.parse_hccn_ping, PING_OK),
])
def test_truncated_and_mangled_input_only_ever_raises_parse_error(parser, sample):
    """Every line-prefix and a few hundred seeded mutations: a result or a ParseError, nothing else."""
    for candidate in mangled(sample, sample):
        try:
            parser(candidate)
        except ParseError:
            pass
