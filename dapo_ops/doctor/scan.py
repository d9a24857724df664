"""One log file's events, read at the speed of a text search rather than line by line.

The lines that can match a signature are found in the whole text at once (anchors.CandidateFinder); only they, and
the few lines around them that say a matched line's time, rank, NPU or Ray task, are parsed (events.parse_line).
What a line lacks it takes from its file, as a reader would: the time from the last stamped line before it (else
the first after it), rank and NPU from what its process printed elsewhere in the file, else from a line at most
NEIGHBOURS away, and the process and node of the Ray task whose traceback it is part of. Lines are split at \\n,
so an evidence line number is the one an editor shows.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Iterable

from dapo_ops.doctor.events import ANSI, Event, Line, NodeClock, parse_line
from dapo_ops.doctor.signatures import Catalog

QUIET_PLOG_LEVELS = (b"[INFO]", b"[DEBUG]", b"[EVENT]", b"[TRACE]")
NEIGHBOURS = 5       # lines apart within which a rank or NPU carries over to an event that lacks it
ORIGIN_LINES = 40    # how far a Ray task's traceback runs below its header (events.RAY_TASK_ORIGIN)
WINDOWS = (1 << 16, 1 << 20, 1 << 24)    # bytes searched for a stamp before the whole rest of the file
ANSI_BYTES = re.compile(ANSI.pattern.encode())
# where a stamp (events.STAMP) may be: its middle, which starts with a literal, so that the search runs at memchr
# speed; the line found is then parsed. A dmesg line's stamp opens it.
STAMP_HINT = re.compile(rb"-\d\d-\d\d[-T ]\d\d:\d\d:\d\d")
DMESG_HINT = re.compile(rb"(?m)^\[|\r\[|" + STAMP_HINT.pattern)
STAMP_BYTES = 64     # a stamp is shorter: how far a window reaches past its end, for one cut at the boundary


class TextLines:
    """A file's text, its lines addressed by start offset and parsed when first asked for."""

    def __init__(self, text: bytes, kind: str, clock: NodeClock):
        self.text, self.kind, self.clock = text, kind, clock
        self._parsed: dict[int, Line] = {}
        self._first_after: tuple[int, datetime | None] | None = None   # (offset searched from, what was found)
        self._hint = DMESG_HINT if kind == "dmesg" else STAMP_HINT

    def start_of(self, offset: int) -> int:
        return self.text.rfind(b"\n", 0, offset) + 1

    def previous(self, start: int) -> int | None:
        return None if start == 0 else self.start_of(start - 1)

    def following(self, start: int) -> int | None:
        end = self.text.find(b"\n", start)
        return None if end < 0 or end + 1 >= len(self.text) else end + 1

    def line(self, start: int) -> Line:
        if start not in self._parsed:
            end = self.text.find(b"\n", start)
            raw = self.text[start:end if end >= 0 else len(self.text)]
            quiet = self.kind == "plog" and raw.startswith(QUIET_PLOG_LEVELS)
            self._parsed[start] = Line(text="") if quiet else parse_line(raw.decode(errors="replace"), self.kind,
                                                                         self.clock)
        return self._parsed[start]

    def last_time(self, low: int, high: int) -> datetime | None:
        """The time of the last stamped line that starts in [low, high): searched backwards in windows that grow
        (a stamp is usually a few lines up), each line tried once however many hints it holds."""
        checked, top = high, high     # lines starting at or after `checked` were tried
        for size in (*WINDOWS, high - low):
            bottom = max(low, top - size)
            for hint in reversed(list(self._hint.finditer(self.text, bottom, min(high, top + STAMP_BYTES)))):
                if hint.start() >= checked:
                    continue
                checked = self.start_of(hint.start())
                if checked >= low and self.line(checked).time is not None:
                    return self.line(checked).time
            if bottom == low:
                return None
            top = bottom
        return None

    def first_time(self, low: int) -> datetime | None:
        """The time of the first stamped line at or after low (asked in rising order of low)."""
        if self._first_after is not None and (self._first_after[1] is None or low <= self._first_after[0]):
            return self._first_after[1]
        found: tuple[int, datetime | None] = (len(self.text), None)
        hint = self._hint.search(self.text, low)
        while hint is not None:
            line_start = self.start_of(hint.start())
            if line_start >= low and self.line(line_start).time is not None:
                found = (line_start, self.line(line_start).time)
                break
            end = self.text.find(b"\n", hint.start())
            hint = None if end < 0 else self._hint.search(self.text, end + 1)
        self._first_after = found
        return found[1]

    def nearest(self, start: int, attribute: str) -> int | None:
        """The value on the closest line within NEIGHBOURS lines, the following lines first (torch_npu prints the
        CANN error, then its own line with PID, Device and RankID)."""
        after = before = start
        for _ in range(NEIGHBOURS):
            after = self.following(after) if after is not None else None
            before = self.previous(before) if before is not None else None
            for other in (after, before):
                if other is not None and getattr(self.line(other), attribute) is not None:
                    return getattr(self.line(other), attribute)
        return None

    def process_facts(self, pids: set[int]) -> dict[int, tuple[int | None, int | None]]:
        """The last rank and NPU each process printed anywhere in the file: one search for all of their numbers."""
        facts: dict[int, tuple[int | None, int | None]] = {}
        if not pids:
            return facts
        numbers = re.compile(b"(?:" + b"|".join(sorted((str(p).encode() for p in pids), key=len, reverse=True))
                             + rb")(?!\d)")
        found = numbers.search(self.text)
        while found is not None:
            before = found.start()
            while self.text[before - 1:before] == b"0":      # a pid printed with leading zeros
                before -= 1
            if self.text[before - 1:before].isdigit():         # inside a longer number: look further on this line
                found = numbers.search(self.text, found.start() + 1)
                continue
            start = self.start_of(found.start())
            line = self.line(start)
            if line.pid in pids:
                rank, npu = facts.get(line.pid, (None, None))
                facts[line.pid] = (line.rank if line.rank is not None else rank,
                                   line.npu if line.npu is not None else npu)
            end = self.text.find(b"\n", found.start())
            found = None if end < 0 else numbers.search(self.text, end + 1)
        return facts


def scan_text(text: bytes, *, node: str, file: str, kind: str, clock: NodeClock, catalog: Catalog) -> list[Event]:
    """The events of one file: its lines that match a signature, with time, rank and NPU where the file says."""
    if b"\x1b" in text:
        text = ANSI_BYTES.sub(b"", text)
    lines = TextLines(text, kind, clock)
    events: list[tuple[Event, int]] = []
    line_no, counted_to = 1, 0
    time_before, previous_start = None, 0
    for start in catalog.finder.line_starts(text):
        line_no += text.count(b"\n", counted_to, start)
        counted_to = start
        line = lines.line(start)
        hit = catalog.match(line.text) if line.text else None
        if hit is None:
            continue
        time_before = line.time or lines.last_time(previous_start, start) or time_before
        previous_start = start
        event = Event(node=node, file=file, line_no=line_no, text=line.text.strip(), signature=hit[0].id,
                      time=time_before or lines.first_time(start), rank=line.rank, npu=line.npu, pid=line.pid,
                      ip=line.ip, details=hit[1])
        events.append((event, start))
    _carry_rank_and_npu(events, lines)
    _carry_task_origin(events, lines)
    return [event for event, _ in events]


def _carry_rank_and_npu(events: list[tuple[Event, int]], lines: TextLines) -> None:
    lacking = [(event, start) for event, start in events if event.rank is None or event.npu is None]
    facts = lines.process_facts({event.pid for event, _ in lacking if event.pid is not None})
    for event, start in lacking:
        known = facts.get(event.pid, (None, None)) if event.pid is not None else (None, None)
        if event.rank is None:
            event.rank = known[0] if known[0] is not None else lines.nearest(start, "rank")
        if event.npu is None:
            event.npu = known[1] if known[1] is not None else lines.nearest(start, "npu")


def _carry_task_origin(events: list[tuple[Event, int]], lines: TextLines) -> None:
    """An event in the traceback of a Ray task's exception belongs to that task's process and node."""
    for event, start in events:
        at: int | None = start
        for _ in range(ORIGIN_LINES):
            if event.ip is not None or at is None:
                break
            origin = lines.line(at).origin
            if origin is not None:
                event.pid, event.ip = event.pid or origin[0], origin[1]
            at = lines.previous(at)


def parse_lines(raw_lines: Iterable[str], *, node: str, file: str, kind: str, clock: NodeClock,
                catalog: Catalog) -> list[Event]:
    """scan_text over lines given one by one (with or without their newline)."""
    text = "".join(line if line.endswith("\n") else line + "\n" for line in raw_lines)
    return scan_text(text.encode(), node=node, file=file, kind=kind, clock=clock, catalog=catalog)
