"""Log lines into timestamped events: pure parsers, one timeline per run.

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
  both; /work/shared/reference/verl.md section 5 for verl's `(TaskRunner pid=N)` console lines).
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
from typing import Iterable

from dapo_ops.doctor.signatures import Catalog

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RAY_PREFIX = re.compile(r"^\((?P<actor>[\w.:<>-]+)(?: pid=(?P<pid>\d+))?(?:, ip=(?P<ip>[\d.]+))?\)\s?")
RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# the header of an exception a Ray task or actor raised, as the caller prints it: `ray::TaskRunner.run() (pid=N,
# ip=A, ...)`; the traceback lines after it come from that process (ray-project/ray python/ray/exceptions.py)
RAY_TASK_ORIGIN = re.compile(r"\(pid=(?P<pid>\d+), ip=(?P<ip>[\d.]+)")
ORIGIN_LINES = 40  # how far a task's traceback runs below its header
STAMP = re.compile(r"(?P<date>\d{4}-\d{2}-\d{2})[-T ](?P<time>\d{2}:\d{2}:\d{2})"
                   r"(?:[.,](?P<frac>\d{1,6})(?:\.(?P<frac2>\d{3}))?)?(?P<tz>Z|[+-]\d{2}:?\d{2}\b)?")
DMESG_RELATIVE = re.compile(r"^\[\s*(?P<secs>\d+\.\d+)\]\s?")
DMESG_HUMAN = re.compile(r"^\[(?P<stamp>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]\s?")
RANK = re.compile(r"RankID:(?P<a>-?\d+)|\buserRank\[(?P<b>\d+)\]|(?<![Rr]emote)(?<!remote )\b[Rr]ank\[(?P<c>\d+)\]"
                  r"|(?<![Rr]emote )(?<![\w])[Rr]ank[= ](?P<d>\d+)\b")
NPU = re.compile(r"Device:(?P<a>-?\d+)|\bdev(?:ice)?(?:LogicId|Id)?\[(?P<b>\d+)\]|\(device=(?P<c>\d+)\)"
                 r"|\bdavinci(?P<d>\d+)\b|\bnpu:(?P<e>\d+)\b")
PID = re.compile(r"\(PID:(?P<a>\d+)|\[PID: (?P<b>\d+)\]|^\[[A-Z]+\] \w+\((?P<c>\d+),")
QUIET_PLOG_LEVELS = ("[INFO]", "[DEBUG]", "[EVENT]", "[TRACE]")
NEIGHBOURS = 5  # lines apart within which a rank or NPU carries over to an event that lacks it


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


@dataclass
class Event:
    node: str
    file: str
    line_no: int
    text: str
    signature: str
    time: datetime | None = None
    rank: int | None = None
    npu: int | None = None
    pid: int | None = None
    ip: str | None = None
    details: dict[str, str] = field(default_factory=dict)


@dataclass
class Line:
    """What one log line says, before any signature: its cleaned text, time and who printed it."""

    text: str
    time: datetime | None = None
    rank: int | None = None
    npu: int | None = None
    pid: int | None = None
    ip: str | None = None
    origin: tuple[int, str] | None = None   # (pid, ip) of the Ray task whose exception this line starts


def _first_int(pattern: re.Pattern, text: str) -> int | None:
    found = pattern.search(text)
    if not found:
        return None
    value = int(next(v for v in found.groupdict().values() if v is not None))
    return value if value >= 0 else None


def parse_stamp(text: str, clock: NodeClock) -> datetime | None:
    found = STAMP.search(text)
    if not found:
        return None
    try:
        naive = datetime.strptime(f"{found['date']} {found['time']}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
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
    pid = ip = None
    prefix = RAY_PREFIX.match(text)
    if prefix and kind in ("console", "ray", "other"):
        pid = int(prefix["pid"]) if prefix["pid"] else None
        ip = prefix["ip"]
        text = RAY_REPEATED.sub("", text[prefix.end():])
    if kind == "dmesg":
        time, text = _dmesg_time(text, clock)
    else:
        time = parse_stamp(text, clock)
    origin = RAY_TASK_ORIGIN.search(text) if prefix is None else None
    return Line(text=text, time=time, rank=_first_int(RANK, text), npu=_first_int(NPU, text),
                pid=_first_int(PID, text) or pid, ip=ip, origin=(int(origin["pid"]), origin["ip"]) if origin else None)


def _fill_times(lines: list[Line]) -> None:
    """A line without a stamp gets the last stamp before it in the file, else the first after it."""
    last = None
    for line in lines:
        if line.time is None:
            line.time = last
        else:
            last = line.time
    following = None
    for line in reversed(lines):
        if line.time is None:
            line.time = following
        else:
            following = line.time


def parse_lines(raw_lines: Iterable[str], *, node: str, file: str, kind: str, clock: NodeClock,
                catalog: Catalog) -> list[Event]:
    """The events of one file: its lines that match a signature, with time, rank and NPU where the file says."""
    lines: list[Line] = []
    matched: list[tuple[int, str, dict[str, str]]] = []
    for raw in raw_lines:
        if kind == "plog" and raw.startswith(QUIET_PLOG_LEVELS):
            lines.append(Line(text="", time=None))
            continue
        line = parse_line(raw, kind, clock)
        lines.append(line)
        hit = catalog.match(line.text)
        if hit is not None:
            matched.append((len(lines) - 1, hit[0].id, hit[1]))
        else:
            line.text = ""    # only its time, rank, NPU and pid are needed from here on
    _fill_times(lines)
    events = []
    for index, signature, details in matched:
        line = lines[index]
        events.append(Event(node=node, file=file, line_no=index + 1, text=line.text.strip(), signature=signature,
                            time=line.time, rank=line.rank, npu=line.npu, pid=line.pid, ip=line.ip,
                            details=details))
    _carry_rank_and_npu(events, lines)
    _carry_task_origin(events, lines)
    return events


def _carry_task_origin(events: list[Event], lines: list[Line]) -> None:
    """An event in the traceback of a Ray task's exception belongs to that task's process and node."""
    for event in events:
        if event.ip is not None:
            continue
        for index in range(event.line_no - 1, max(-1, event.line_no - 1 - ORIGIN_LINES), -1):
            if lines[index].origin is not None:
                event.pid, event.ip = event.pid or lines[index].origin[0], lines[index].origin[1]
                break


def _nearest(lines: list[Line], index: int, attribute: str) -> int | None:
    """The value of attribute on the closest line within NEIGHBOURS lines, the following lines first (torch_npu
    prints the CANN error, then its own line with PID, Device and RankID)."""
    for distance in range(1, NEIGHBOURS + 1):
        for other in (index + distance, index - distance):
            if 0 <= other < len(lines) and getattr(lines[other], attribute) is not None:
                return getattr(lines[other], attribute)
    return None


def _carry_rank_and_npu(events: list[Event], lines: list[Line]) -> None:
    by_pid: dict[int, tuple[int | None, int | None]] = {}
    for line in lines:
        if line.pid is not None and (line.rank is not None or line.npu is not None):
            rank, npu = by_pid.get(line.pid, (None, None))
            by_pid[line.pid] = (line.rank if line.rank is not None else rank, line.npu if line.npu is not None else npu)
    for event in events:
        known = by_pid.get(event.pid, (None, None)) if event.pid is not None else (None, None)
        if event.rank is None:
            event.rank = known[0] if known[0] is not None else _nearest(lines, event.line_no - 1, "rank")
        if event.npu is None:
            event.npu = known[1] if known[1] is not None else _nearest(lines, event.line_no - 1, "npu")


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
