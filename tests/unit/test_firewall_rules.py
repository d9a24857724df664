"""The firewall package's parts on their own: a rule's conditions read from nft and iptables-save text, the walk of
a chain, and the port segments blocked_ports judges (tests/unit/test_firewall.py judges whole rulesets)."""

import pytest

from dapo_ops.firewall.chains import Chain, Rule, walk
from dapo_ops.firewall.iptables import _ipt_rule
from dapo_ops.firewall.nft import _nft_rule
from dapo_ops.firewall.verdict import _cuts, _segments


@pytest.mark.parametrize("line, rule", [
    ("tcp dport 6379 accept", Rule("accept", None, ((6379, 6379),))),
    ("ct state established,related accept", Rule("accept", applies=False)),
    ('iifname "lo" accept', Rule("accept", applies=False, certain=False)),
    ("udp dport 4791 accept", Rule("accept", applies=False, certain=False)),
    ("ip saddr 10.0.0.0/8 tcp dport 6379 accept", Rule("accept", None, ((6379, 6379),), certain=False)),
    ("tcp dport @ray counter packets 0 bytes 0 accept", Rule("accept", None, ((6379, 6379), (10002, 19999)))),
    ("tcp dport != 22 drop", Rule("drop", certain=False)),
    ("meta l4proto tcp jump extra", Rule("jump", "extra")),
    ("reject with icmp type host-prohibited", Rule("reject")),
    ("counter packets 0 bytes 0", None),
])
def test_an_nft_rule_is_read_into_its_verdict_ports_and_conditions(line, rule):
    assert _nft_rule(line, {"ray": " 6379, 10002-19999 "}) == rule


@pytest.mark.parametrize("args, rule", [
    ("-p tcp -m tcp --dport 22 -j ACCEPT", Rule("accept", None, ((22, 22),))),
    ("-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", Rule("accept", applies=False)),
    # every condition is taken out before what is left is judged: -p after a state that does not apply still is
    ("-m conntrack --ctstate ESTABLISHED -p tcp -j ACCEPT", Rule("accept", applies=False)),
    ("-i lo -j ACCEPT", Rule("accept", applies=False)),
    ("-i eth0 -p tcp -j DROP", Rule("drop", certain=False)),
    ("-p udp -j ACCEPT", Rule("accept", applies=False)),
    ("-s 10.0.0.0/8 -p tcp -m multiport --dports 6379,8265 -j ACCEPT",
     Rule("accept", None, ((6379, 6379), (8265, 8265)), certain=False)),
    ("-p tcp ! --dport 22 -j DROP", Rule("drop", certain=False)),
    ("-p tcp -g RAY", Rule("goto", "RAY")),
    ("-j LOG --log-prefix dropped", None),
    ("-p tcp", None),
])
def test_an_iptables_rule_is_read_into_its_verdict_ports_and_conditions(args, rule):
    assert _ipt_rule(args.split()) == rule


def test_walk_first_certain_verdict_decides_and_an_uncertain_drop_does_not():
    chain = Chain("input", "drop", [Rule("drop", ports=((22, 22),), certain=False), Rule("accept", ports=((22, 22),)),
                                    Rule("drop", ports=((6379, 6379),))])
    assert walk(chain, {}, 22) == "accept"
    assert walk(chain, {}, 6379) == "drop"
    assert walk(chain, {}, 8265) is None  # falls through: the policy decides


def test_walk_follows_jumps_and_gotos():
    chains = {"extra": Chain("extra", None, [Rule("accept", ports=((10002, 19999),)),
                                            Rule("drop", ports=((52365, 52365),)), Rule("return")]),
              "loop": Chain("loop", None, [Rule("jump", "loop"), Rule("accept")])}
    jump = Chain("input", "drop", [Rule("jump", "extra"), Rule("accept", ports=((52365, 52365),))])
    assert walk(jump, chains, 12000) == "accept"
    assert walk(jump, chains, 52365) == "drop"
    assert walk(jump, chains, 8265) is None
    uncertain = Chain("input", "drop", [Rule("jump", "extra", certain=False), Rule("accept", ports=((52365, 52365),))])
    assert walk(uncertain, chains, 52365) == "accept"  # a drop under an uncertain jump is not counted
    goto = Chain("input", "drop", [Rule("goto", "extra"), Rule("accept")])
    assert walk(goto, chains, 8265) is None  # a goto does not come back
    assert walk(Chain("input", "drop", [Rule("jump", "loop")]), chains, 1) == "accept"  # no endless loop


def test_a_wanted_range_is_judged_once_per_segment_between_the_numbers_rules_name():
    cuts = _cuts(("tcp dport 6379 accept\ntcp dport 10002-19999 accept", None))
    assert _segments(cuts, 6000, 7000) == [(6000, 6378), (6379, 6379), (6380, 7000)]
    # a number named is a segment of its own (the first and the last port of a range each are)
    assert _segments(cuts, 10000, 20000) == [(10000, 10001), (10002, 10002), (10003, 19998), (19999, 19999),
                                             (20000, 20000)]
    assert _segments(cuts, 30000, 30010) == [(30000, 30010)]
