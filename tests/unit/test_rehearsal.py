"""The launch rehearsal's pure parts: its config, its event lines and what they add up to, the step reporter, and
the tcp backend's mailbox (over loopback)."""

import json
import threading
import time

import pytest

from dapo_ops.errors import UsageError
from dapo_ops.job.render import RenderNode
from dapo_ops.job.spec import load_spec
from dapo_ops.launch import rehearsal, rehearsal_driver
from dapo_ops.launch.steps import Steps
from dapo_ops.paths import PROJECT_ROOT

NODES = [RenderNode("node1", "10.0.0.1", "eth1", "/env.sh", "/opt/env", "/opt/src/verl", True),
         RenderNode("node2", "10.0.0.2", "eth1", "/env.sh", "/opt/env", "/opt/src/verl", False)]


def event_line(event, **fields):
    return "DAPO-REHEARSAL " + json.dumps({"event": event, "time": 0, **fields})


def test_config_lists_the_nodes_in_rank_order_with_the_sp_size_and_deadlines():
    spec = load_spec(PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml")
    config = rehearsal.config(spec, NODES, "tcp", rehearsal.Timeouts(placement=10, check=5, collective=7))
    assert config["nodes"] == [{"name": "node1", "ip": "10.0.0.1", "nic": "eth1"},
                               {"name": "node2", "ip": "10.0.0.2", "nic": "eth1"}]
    assert (config["npus_per_node"], config["sp_size"], config["backend"]) == (16, 8, "tcp")
    assert (config["placement_timeout"], config["check_timeout"], config["collective_timeout"]) == (10, 5, 7)
    assert "ASCEND_TOOLKIT_HOME" in config["required_env"]
    json.dumps(config)


def test_backend_defaults_to_hccl_and_rejects_unknown_ones():
    assert rehearsal.backend_for({}) == "hccl"
    assert rehearsal.backend_for({"dapo_rehearsal_backend": "tcp"}) == "tcp"
    with pytest.raises(UsageError, match="'nccl' is not one of hccl, gloo, tcp"):
        rehearsal.backend_for({"dapo_rehearsal_backend": "nccl"})


@pytest.mark.parametrize("line", ["", "2026-11-29 INFO worker.py: connecting", "DAPO-REHEARSAL {not json",
                                  "DAPO-REHEARSAL [1, 2]", 'DAPO-REHEARSAL {"no_event": 1}'])
def test_other_lines_are_not_events(line):
    assert rehearsal.parse_event(line) is None


def test_a_passing_rehearsal_adds_up_to_hosts_ranks_and_timings():
    per_rank = [{"rank": r, "host": "node1" if r < 2 else "node2", "device": f"/dev/davinci{r % 2}", "pid": 100 + r,
                 "timings": {"check": 0.01, "all_reduce": 0.1 * (r + 1), "all_to_all": 0.02}} for r in range(4)]
    lines = ["noise", event_line("placing", ranks=4, nodes=2),
             event_line("placed", ranks=4, hosts={"node1": 2, "node2": 2}, seconds=3.5),
             event_line("checked", ranks=4, seconds=4.0),
             event_line("result", ok=True, backend="tcp", per_rank=per_rank, sp_groups=2, seconds=5.0)]
    outcome = rehearsal.outcome([e for e in map(rehearsal.parse_event, lines) if e])
    assert outcome.ok and outcome.ranks == 4 and outcome.hosts == {"node1": 2, "node2": 2}
    assert outcome.placed_seconds == 3.5 and outcome.seconds == 5.0 and outcome.backend == "tcp"
    timings = outcome.timing_summary()
    assert timings["all_reduce"] == {"median": 0.25, "max": 0.4, "slowest_rank": 3, "slowest_host": "node2"}
    assert outcome.as_record()["timings"] == timings and len(outcome.as_record()["per_rank"]) == 4


def test_a_failed_rehearsal_names_rank_and_host():
    failures = [{"phase": "check", "rank": r, "host": "node2", "error": f"/dev/davinci{r - 16} is missing"}
                for r in (17, 18, 19, 20)]
    outcome = rehearsal.outcome([{"event": "placing", "ranks": 32}, {"event": "result", "ok": False,
                                                                       "failures": failures}])
    assert not outcome.ok
    assert outcome.describe_failure() == ("rank 17 on node2: /dev/davinci1 is missing; rank 18 on node2: "
                                          "/dev/davinci2 is missing; rank 19 on node2: /dev/davinci3 is missing "
                                          "(and 1 more)")


def test_a_placement_failure_has_no_rank_and_a_missing_result_says_so():
    outcome = rehearsal.outcome([{"event": "result", "ok": False, "failures": [
        {"phase": "placement", "rank": None, "host": None, "error": "only 1 of 2 placement groups"}]}])
    assert outcome.describe_failure() == "placement: only 1 of 2 placement groups"
    died = rehearsal.outcome([{"event": "placing", "ranks": 32}])
    assert not died.ok and died.describe_failure() == "the rehearsal driver ended without a result"


def test_steps_report_start_notes_and_end_with_time_or_failure():
    seen = []
    steps = Steps(lambda kind, title, text, seconds: seen.append((kind, title, text, seconds is not None)))
    with steps.step("start the head") as step:
        steps.note("waiting")
        step.done("up")
    with pytest.raises(RuntimeError), steps.step("workers"):
        raise RuntimeError("node2 unreachable")
    assert seen == [("start", "start the head", None, False), ("note", "start the head", "waiting", False),
                    ("done", "start the head", "up", True), ("start", "workers", None, False),
                    ("fail", "workers", "node2 unreachable", True)]
    assert set(steps.seconds) == {"start the head"}


def test_the_tcp_mailbox_collects_messages_by_tag_and_sender():
    mailbox = rehearsal_driver.Mailbox("127.0.0.1")
    senders = [threading.Thread(target=rehearsal_driver.send,
                                args=(("127.0.0.1", mailbox.port), rank, "all_to_all",
                                      rehearsal_driver._chunk(rank, 0, 100000), 5)) for rank in (1, 2, 3)]
    for sender in senders:
        sender.start()
    got = mailbox.wait_for("all_to_all", [1, 2, 3], time.monotonic() + 10)
    assert got == {r: rehearsal_driver._chunk(r, 0, 100000) for r in (1, 2, 3)}
    with pytest.raises(TimeoutError, match=r"nothing from rank\(s\) \[4\]"):
        mailbox.wait_for("all_to_all", [4], time.monotonic() + 0.2)


def test_interface_address_of_loopback_and_of_a_missing_interface():
    assert rehearsal_driver.interface_address("lo") == "127.0.0.1"
    assert rehearsal_driver.interface_address("no-such-if0") is None
