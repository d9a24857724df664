"""The whole-text scan: the literals a match rule requires, the lines they find, and what a found line takes from
the rest of its file."""

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dapo_ops.doctor.anchors import CandidateFinder, required_literals
from dapo_ops.doctor.events import NodeClock
from dapo_ops.doctor.scan import WINDOWS, scan_text
from dapo_ops.doctor.signatures import Match, default_catalog

DATA = Path(__file__).parent.parent / "data" / "doctor"
UTC = timezone.utc


@pytest.mark.parametrize("pattern, literals", [
    (r"\b507033\b|ACL_ERROR_RT_DEV_SETUP_ERROR", {"507033", "ACL_ERROR_RT_DEV_SETUP_ERROR"}),
    (r"hcclCommInitRootInfo(?:Config)?\b.*error code is (?P<n>\d+)", {"hcclCommInitRootInfo"}),
    (r"(?:address: (?P<ip>[\d.]+) .*)?has been marked dead", {"has been marked dead"}),
    (r"Object of type (?:int32|int64) is not", {"Object of type int"}),   # the parser takes out a common prefix
    (r"(?:alpha|beta) is", {"alpha", "beta"}),
    (r"(?:ab)+cdef", {"cdef"}),
    (r"(?<![\w-])E[A-Z0-9]\d{4}:", None),           # nothing of three characters or more is required
    (r"(?i)0x81078603", None),                      # ignoring case: run as a regex
    (r"foo|\w+bar", {"foo", "bar"}),
    (r"foo|\w+", None),                             # one alternative requires nothing
])
def test_the_literals_a_regex_requires(pattern, literals):
    found = required_literals(re.compile(pattern))
    assert (set(found) if found is not None else None) == literals


def test_a_literal_holding_another_is_not_searched_twice():
    finder = CandidateFinder.for_patterns([Match(groups=(("ERR",),)), Match(regex=re.compile("ACL_ERROR_RT_X|507"))])
    assert finder.literals == (b"507", b"ERR") and finder.regexes == ()


def test_regexes_without_literals_are_searched_without_their_leading_assertion():
    finder = CandidateFinder.for_patterns([Match(regex=re.compile(r"(?<![\w-])E[A-Z0-9]\d{4}:"))])
    assert [r.pattern for r in finder.regexes] == [rb"E[A-Z0-9]\d{4}:"]
    assert finder.line_starts(b"one\nxx EI0006: two\nthree") == [4]
    anchored = CandidateFinder.for_patterns([Match(regex=re.compile(r"^E[A-Z0-9]\d{4}:"))])   # ^ after a Ray prefix
    assert anchored.line_starts(b"one\n(Actor pid=1) EI0006: two\n") == [4]


def _fixture_lines():
    for path in sorted(DATA.rglob("*")):
        if path.is_file() and path.suffix not in (".json", ".md"):
            for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
                yield path, number, line


def test_every_fixture_line_a_signature_matches_is_found_by_the_literals():
    """The scan's promise: a line a signature matches is never skipped (checked on every fixture line, each also
    with ANSI colour around it)."""
    catalog = default_catalog()
    finder = catalog.finder
    matched = 0
    for path, number, line in _fixture_lines():
        text = line.decode(errors="replace")
        if catalog.match(text) is None:
            continue
        matched += 1
        assert finder.line_starts(b"noise\n" + line + b"\n") == [6], f"{path}:{number}"
    assert matched >= 49


def _stamped(minute):
    return f"[ERROR] HCCL(7,python):2026-12-01-10:{minute:02d}:00.000.000 [a.cc:1][7]start\n".encode()


def test_time_comes_from_the_last_stamped_line_before_however_far():
    filler = b"x" * 999 + b"\n"
    text = (_stamped(1) + filler * (WINDOWS[-1] // len(filler) + 10)
            + b"EI0006: Getting socket times out.\n")
    events = scan_text(text, node="n", file="f", kind="other", clock=NodeClock(), catalog=default_catalog())
    assert [e.signature for e in events] == ["hccl-socket-timeout"]
    assert events[0].time == datetime(2026, 12, 1, 10, 1, tzinfo=UTC)
    assert events[0].line_no == WINDOWS[-1] // len(filler) + 12


def test_time_comes_from_the_first_stamped_line_after_when_none_is_before():
    text = b"EI0006: Getting socket times out.\nplain\n" + _stamped(7) + _stamped(9)
    events = scan_text(text, node="n", file="f", kind="other", clock=NodeClock(), catalog=default_catalog())
    assert events[0].time == datetime(2026, 12, 1, 10, 7, tzinfo=UTC)


def test_quiet_plog_lines_give_no_time_and_no_event():
    text = (b"[INFO] HCCL(7,python):2026-12-01-10:05:00.000.000 [a.cc:1][7]EI0006 in passing\n"
            b"EI0006: Getting socket times out.\n" + _stamped(8))
    events = scan_text(text, node="n", file="f", kind="plog", clock=NodeClock(), catalog=default_catalog())
    assert [(e.line_no, e.time.minute) for e in events] == [(2, 8)]


def test_a_process_s_rank_is_found_anywhere_in_the_file_by_its_pid_only():
    text = (b"[ERROR] 2026-12-01-10:00:00 (PID:41210, Device:1, RankID:3) ERR00100 other process\n"
            + b"filler\n" * 100
            + b"[ERROR] 2026-12-01-10:00:01 (PID:4121, Device:5, RankID:21) hello\n"
            + b"filler\n" * 100
            + b"EI0006: [PID: 4121] 2026-12-01-10:14:03.101.223 Getting socket times out.\n")
    events = scan_text(text, node="n", file="f", kind="other", clock=NodeClock(), catalog=default_catalog())
    timeout = next(e for e in events if e.signature == "hccl-socket-timeout")
    assert (timeout.pid, timeout.rank, timeout.npu) == (4121, 21, 5)


def test_colour_and_progress_bars_do_not_hide_a_line():
    text = (b"\x1b[36m(WorkerDict pid=77, ip=10.0.0.3)\x1b[0m 10%|#   |\r"
            b"\x1b[36m(WorkerDict pid=77, ip=10.0.0.3)\x1b[0m RuntimeError: ... error code is \x1b[1m507033\x1b[0m\n")
    events = scan_text(text, node="n", file="f", kind="console", clock=NodeClock(), catalog=default_catalog())
    assert [(e.signature, e.pid, e.ip, e.line_no) for e in events] == [("acl-device-setup", 77, "10.0.0.3", 1)]


@pytest.mark.parametrize("pattern, text, lines", [
    (r"(?i)^error: boom", b"x\n(Actor pid=5) ERROR: boom\n", [2]),           # ^ after a Ray prefix
    (r"E[A-Z]\d{4}$", b"x EI0006\r\n(A pid=1) x EI0006 [repeated 3x across cluster]\n", [0, 10]),
    (r"\AE[A-Z]\d{4}", b"hello\nEI0006 x\n", [6]),
    (r"(?i)code[^;]*failed", b"code 1\ncode 2 failed\n", [0, 7]),       # a match running on does not hide the next
    (r"\u00e9x", b"a\nb\n", [0, 2]),                                          # no byte pattern: every line
])
def test_the_whole_text_search_of_a_regex_without_literals_finds_what_the_line_matching_would(pattern, text, lines):
    finder = CandidateFinder.for_patterns([Match(regex=re.compile(pattern))])
    assert finder.line_starts(text) == lines


def test_a_dmesg_line_after_a_carriage_return_gives_its_time():
    clock = NodeClock(boot_time=datetime(2026, 12, 1, 10, 0, tzinfo=UTC))
    text = b"progress\r[   5.000000] usb 1-1: new\nOut of memory: Killed process 9\n"
    events = scan_text(text, node="n", file="dmesg.txt", kind="dmesg", clock=clock, catalog=default_catalog())
    assert [(e.signature, e.time) for e in events] == [("host-oom-killer", datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC))]


def test_a_pid_printed_with_leading_zeros_is_the_same_process():
    text = (b"[ERROR] 2026-12-01-10:00:00 (PID:0042, Device:3, RankID:5) hello\n" + b"x\n" * 6
            + b"EI0006: [PID: 42] Getting socket times out.\n")
    event = scan_text(text, node="n", file="f", kind="other", clock=NodeClock(), catalog=default_catalog())[0]
    assert (event.pid, event.rank, event.npu) == (42, 5, 3)


@pytest.mark.parametrize("text, hours", [
    (b'time="0001-01-01 00:00:00 +0000 UTC" msg=started\nEI0006: Getting socket times out.\n', 8),  # Go's zero time
    (b"9999-12-31 23:59:59 x\nEI0006: Getting socket times out.\n", -8),
    (b"rank=" + b"7" * 5000 + b" [PID: " + b"1" * 5000 + b"] EI0006: Getting socket times out.\n", 0),
])
def test_stamps_and_numbers_out_of_range_are_no_stamp_and_no_number(text, hours):
    clock = NodeClock(utc_offset=timedelta(hours=hours))    # the zone that takes the stamp off the calendar
    events = scan_text(text, node="n", file="f", kind="other", clock=clock, catalog=default_catalog())
    assert [(e.signature, e.time, e.rank, e.pid) for e in events] == [("hccl-socket-timeout", None, None, None)]


def test_a_dmesg_stamp_beyond_the_calendar_is_no_stamp():
    clock = NodeClock(boot_time=datetime(2026, 12, 1, tzinfo=UTC))
    events = scan_text(b"[99999999999999.0] Out of memory: Killed process 9\n", node="n", file="d", kind="dmesg",
                       clock=clock, catalog=default_catalog())
    assert [(e.signature, e.time) for e in events] == [("host-oom-killer", None)]
