"""doctor's log parsers (issue 16): stamps of every documented format onto the controller's UTC, ranks and NPUs where
the line (or its neighbours, or its process elsewhere) says them."""

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dapo_ops.doctor.bundle import kind_of
from dapo_ops.doctor.events import NodeClock, parse_line, parse_stamp
from dapo_ops.doctor.scan import parse_lines
from dapo_ops.doctor.signatures import default_catalog

UTC = timezone.utc
PLUS8 = NodeClock(utc_offset=timedelta(hours=8))


@pytest.mark.parametrize("line, expected", [
    ("[ERROR] HCCL(4121,python):2025-11-02-10:14:03.101.223 [x.cc:1][4121]text",
     datetime(2025, 11, 2, 2, 14, 3, 101223, UTC)),
    ("[ERROR] 2025-11-02-10:14:03 (PID:4121, Device:5, RankID:21) ERR00100 PTA call acl api failed",
     datetime(2025, 11, 2, 2, 14, 3, tzinfo=UTC)),
    ("[2025-11-02 10:14:03,101 E 2231 2231] (raylet) node_manager.cc:3049: text",
     datetime(2025, 11, 2, 2, 14, 3, 101000, UTC)),
    ("2025-11-02T10:14:03,123456+00:00 kernel: text", datetime(2025, 11, 2, 10, 14, 3, 123456, UTC)),
    ("no stamp here, session_2025-11-02_10-14-03", None),
])
def test_stamps_of_each_format_become_utc(line, expected):
    assert parse_stamp(line, PLUS8) == expected


def test_skew_moves_a_node_onto_the_controller_s_clock():
    behind = NodeClock(skew=timedelta(seconds=-3))
    assert parse_stamp("2025-11-02 02:44:01,000", behind) == datetime(2025, 11, 2, 2, 44, 4, tzinfo=UTC)


def test_dmesg_relative_stamps_need_the_boot_time():
    boot = NodeClock(boot_time=datetime(2025, 11, 2, 0, 0, tzinfo=UTC))
    line = parse_line("[ 8640.500000] Out of memory: Killed process 4121 (python)", "dmesg", boot)
    assert line.time == datetime(2025, 11, 2, 2, 24, 0, 500000, UTC)
    assert line.text.startswith("Out of memory")
    assert parse_line("[ 8640.500000] x", "dmesg", NodeClock()).time is None
    human = parse_line("[Sun Nov  2 10:24:00 2025] x", "dmesg", PLUS8)
    assert human.time == datetime(2025, 11, 2, 2, 24, tzinfo=UTC)


def test_ray_prefix_and_ansi_codes_are_read_off_the_console_line():
    line = parse_line("\x1b[36m(WorkerDict pid=4121, ip=10.78.0.12)\x1b[0m EI0006: x [repeated 7x across cluster]",
                      "console", NodeClock())
    assert (line.pid, line.ip, line.text) == (4121, "10.78.0.12", "EI0006: x")


@pytest.mark.parametrize("text, rank, npu", [
    ("[ERROR] 2025-11-02-10:14:03 (PID:4121, Device:5, RankID:21) ERR00100", 21, 5),
    ("hcclCommInitRootInfoConfig failed, rank[3], error code is 9 remote rank[21]", 3, None),
    ("Set device failed, devId[5]", None, 5),
    ("Heartbeat lost (device=6)", None, 6),
    ("(PID:1, Device:-1, RankID:-1) ERR99999", None, None),
])
def test_rank_and_npu_where_the_line_says_them(text, rank, npu):
    line = parse_line(text, "other", NodeClock())
    assert (line.rank, line.npu) == (rank, npu)


def test_an_event_takes_time_rank_and_npu_from_the_torch_npu_line_after_it():
    lines = ["Traceback (most recent call last):",
             "RuntimeError: NPU function error: c10_npu::SetDevice(device_id), error code is 507033",
             "[ERROR] 2025-11-02-10:14:03 (PID:4121, Device:5, RankID:21) ERR00100 PTA call acl api failed"]
    events = parse_lines(lines, node="node2", file="node2/w.err", kind="ray", clock=PLUS8, catalog=default_catalog())
    first = events[0]
    assert (first.signature, first.line_no, first.rank, first.npu) == ("acl-device-setup", 2, 21, 5)
    assert first.time == datetime(2025, 11, 2, 2, 14, 3, tzinfo=UTC)
    assert events[1].signature == "torch-npu-error-code"


def test_quiet_plog_levels_are_skipped_but_keep_line_numbers():
    lines = ["[INFO] HCCL(1,python):2025-11-02-10:14:03.000.000 [a.cc:1][1]EI0006 mentioned in passing",
             "[ERROR] HCCL(1,python):2025-11-02-10:14:04.000.000 [a.cc:2][1]EI0006: Getting socket times out."]
    events = parse_lines(lines, node="n", file="n/plog-1.log", kind="plog", clock=NodeClock(),
                         catalog=default_catalog())
    assert [(e.line_no, e.pid) for e in events] == [(2, 1)]


@pytest.mark.parametrize("relative, kind", [
    ("dmesg.txt", "dmesg"), ("plog/plog-4121_20251102.log", "plog"), ("plog/debug/device-0/device-1_2.log", "plog"),
    ("ray/raylet.out", "ray"), ("ray/worker-ab-01000000-4121.err", "ray"), ("ray/job-driver-raysubmit_x.log", "console"),
    ("console.log", "console"), ("notes.txt", "other"),
])
def test_the_kind_of_a_file_from_its_name(relative, kind):
    assert kind_of(Path(relative)) == kind
