"""What a log line says (its time, rank, NPU, process), and the event a signature makes of it: pure parsers.

The formats, and where each is documented:
- CANN plog and device logs: `[Level] Module(PID,PName):YYYY-MM-DD-hh:mm:ss.fff.zzz [file:line]text` (CANN Log
  Reference, "Log Format": https://www.hiascend.com/document/detail/en/canncommercial/800/maintenref/logreference/logreference_0001.html);
  CANN error messages repeat the stamp: `EI0002: [PID: 7277] 2024-11-28-11:59:30.645.648 ...`
  (Ascend/pytorch docs/zh/troubleshooting/HCCL_timeout.md).
- torch_npu: `[ERROR] YYYY-MM-DD-hh:mm:ss (PID:p, Device:d, RankID:r) ERRxxyyy ...` (Ascend/pytorch
  torch_npu/utils/error_code.py).
- Ray's own logs (raylet.out, gcs_server.out, python-core-*.log): `[YYYY-MM-DD hh:mm:ss,mmm L pid tid] (component)
  file.cc:N: text`; worker output forwarded to the driver: `(Actor pid=N, ip=A) text`, often with ANSI colours
  and `[repeated Nx across cluster]` (ray-project/ray doc/source/ray-core/scheduling/ray-oom-prevention.rst shows
  both; verl's console lines come from its TaskRunner actor, hence `(TaskRunner pid=N)`: verl v0.7.0
  verl/trainer/main_ppo.py TaskRunner).
- Python logging in driver logs: `YYYY-MM-DD hh:mm:ss,mmm LEVEL file.py:N -- text`.
- dmesg: `[  secs.usec] text` relative to boot (needs the node's boot time), `dmesg -T` `[Tue Dec  1 17:00:00 2026]`,
  or `dmesg --time-format iso` `2026-12-01T17:00:00,123456+00:00`.
Naive stamps are the node's local time: NodeClock turns them into UTC (its zone) and onto the controller's clock
(its skew).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RAY_PREFIX = re.compile(r"^\((?P<actor>[\w.:<>-]+)(?: pid=(?P<pid>\d+))?(?:, ip=(?P<ip>[\d.]+))?\)\s?")
RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# the header of an exception a Ray task or actor raised, as the caller prints it: `ray::TaskRunner.run() (pid=N,
# ip=A, ...)`; the traceback lines after it come from that process (ray-project/ray python/ray/exceptions.py)
RAY_TASK_ORIGIN = re.compile(r"\(pid=(?P<pid>\d+), ip=(?P<ip>[\d.]+)")
STAMP = re.compile(r"(?P<date>\d{4}-\d{2}-\d{2})[-T ](?P<time>\d{2}:\d{2}:\d{2})"
                   r"(?:[.,](?P<frac>\d{1,6})(?:\.(?P<frac2>\d{3}))?)?(?P<tz>Z|[+-]\d{2}:?\d{2}\b)?")
DMESG_RELATIVE = re.compile(r"^\[\s*(?P<secs>\d+\.\d+)\]\s?")
DMESG_HUMAN = re.compile(r"^\[(?P<stamp>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]\s?")
RANK = re.compile(r"RankID:(?P<a>-?\d+)|\buserRank\[(?P<b>\d+)\]|(?<![Rr]emote)(?<!remote )\b[Rr]ank\[(?P<c>\d+)\]"
                  r"|(?<![Rr]emote )(?<![\w])[Rr]ank[= ](?P<d>\d+)\b")
NPU = re.compile(r"Device:(?P<a>-?\d+)|\bdev(?:ice)?(?:LogicId|Id)?\[(?P<b>\d+)\]|\(device=(?P<c>\d+)\)"
                 r"|\bdavinci(?P<d>\d+)\b|\bnpu:(?P<e>\d+)\b")
PID = re.compile(r"\(PID:(?P<a>\d+)|\[PID: (?P<b>\d+)\]|^\[[A-Z]+\] \w+\((?P<c>\d+),")


@dataclass(frozen=True)
class NodeClock:
    """How a node's naive stamps map to the controller's UTC: its zone, its clock skew, its boot time (dmesg)."""

    utc_offset: timedelta = timedelta(0)
    skew: timedelta = timedelta(0)          # node clock minus controller clock
    boot_time: datetime | None = None       # UTC, on the node's clock

    def to_utc(self, naive_local: datetime) -> datetime:
        return (naive_local - self.utc_offset - self.skew).replace(tzinfo=timezone.utc)

    def aware_to_utc(self, aware: datetime) -> datetime:
        return (aware - self.skew).astimezone(timezone.utc)


@dataclass(kw_only=True)
class Line:
    """What one log line says, before any signature: its cleaned text, time and who printed it."""

    text: str
    time: datetime | None = None
    rank: int | None = None
    npu: int | None = None
    pid: int | None = None
    ip: str | None = None
    origin: tuple[int, str] | None = None   # (pid, ip) of the Ray task whose exception this line starts


@dataclass(kw_only=True)
class Event(Line):
    """A line that matched a signature, where it was found."""

    node: str
    file: str
    line_no: int
    signature: str
    details: dict[str, str] = field(default_factory=dict)


MAX_DIGITS = 10    # a longer number is no pid, rank or NPU (and int() refuses very long ones)


def _number(digits: str | None) -> int | None:
    if digits is None or len(digits.lstrip("-")) > MAX_DIGITS:
        return None
    return int(digits)


def _first_int(pattern: re.Pattern, text: str) -> int | None:
    found = pattern.search(text)
    if not found:
        return None
    value = _number(next(v for v in found.groupdict().values() if v is not None))
    return value if value is not None and value >= 0 else None


def parse_stamp(text: str, clock: NodeClock) -> datetime | None:
    """The first stamp of the text on the controller's UTC; None for none, or for one no calendar holds (Go's zero
    time 0001-01-01 on a node east of UTC lands before year 1)."""
    found = STAMP.search(text)
    if not found:
        return None
    try:
        return _stamp(found, clock)
    except (ValueError, OverflowError):
        return None


def _stamp(found: re.Match, clock: NodeClock) -> datetime:
    naive = datetime.strptime(f"{found['date']} {found['time']}", "%Y-%m-%d %H:%M:%S")
    frac, frac2 = found["frac"], found["frac2"]
    if frac2 is not None:      # CANN: .milliseconds.microseconds
        micro = int(frac) * 1000 + int(frac2)
    else:
        micro = int(frac.ljust(6, "0")[:6]) if frac else 0
    naive = naive.replace(microsecond=micro)
    tz = found["tz"]
    if tz is None:
        return clock.to_utc(naive)
    offset = timezone.utc if tz == "Z" else datetime.strptime(tz.replace(":", ""), "%z").tzinfo
    return clock.aware_to_utc(naive.replace(tzinfo=offset))


def _dmesg_time(text: str, clock: NodeClock) -> tuple[datetime | None, str]:
    try:
        return _dmesg_stamp(text, clock)
    except (ValueError, OverflowError):
        return None, text


def _dmesg_stamp(text: str, clock: NodeClock) -> tuple[datetime | None, str]:
    relative = DMESG_RELATIVE.match(text)
    if relative:
        rest = text[relative.end():]
        if clock.boot_time is None:
            return None, rest
        return clock.aware_to_utc(clock.boot_time + timedelta(seconds=float(relative["secs"]))), rest
    human = DMESG_HUMAN.match(text)
    if human:
        naive = datetime.strptime(" ".join(human["stamp"].split()), "%a %b %d %H:%M:%S %Y")
        return clock.to_utc(naive), text[human.end():]
    return parse_stamp(text, clock), text


def parse_line(raw: str, kind: str, clock: NodeClock) -> Line:
    """One line of a file of the given kind (plog, ray, console, dmesg, other)."""
    text = ANSI.sub("", raw.rstrip("\r\n"))
    if "\r" in text:    # a progress bar redrawn before it: what a terminal shows is what follows the last \r
        text = next((part for part in reversed(text.split("\r")) if part.strip()), "")
    pid = ip = None
    prefix = RAY_PREFIX.match(text)
    if prefix and kind in ("console", "ray", "other"):
        pid = _number(prefix["pid"])
        ip = prefix["ip"]
        text = RAY_REPEATED.sub("", text[prefix.end():])
    if kind == "dmesg":
        time, text = _dmesg_time(text, clock)
    else:
        time = parse_stamp(text, clock)
    origin = RAY_TASK_ORIGIN.search(text) if prefix is None else None
    origin_pid = _number(origin["pid"]) if origin else None
    return Line(text=text, time=time, rank=_first_int(RANK, text), npu=_first_int(NPU, text),
                pid=_first_int(PID, text) or pid, ip=ip, origin=(origin_pid, origin["ip"]) if origin_pid else None)


def apply_pid_map(events: list[Event], known: dict[tuple[str, int], tuple[int | None, int | None]]) -> None:
    """Across the files of one node: an event whose process printed its rank or NPU elsewhere gets them."""
    for event in events:
        if event.pid is None or (event.node, event.pid) not in known:
            continue
        rank, npu = known[(event.node, event.pid)]
        event.rank = event.rank if event.rank is not None else rank
        event.npu = event.npu if event.npu is not None else npu


def pid_map(events: list[Event]) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    known: dict[tuple[str, int], tuple[int | None, int | None]] = {}
    for event in events:
        if event.pid is not None and (event.rank is not None or event.npu is not None):
            rank, npu = known.get((event.node, event.pid), (None, None))
            known[(event.node, event.pid)] = (rank if rank is not None else event.rank,
                                              npu if npu is not None else event.npu)
    return known
