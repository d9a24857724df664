"""verl's metric lines, parsed where they really are.

Console: verl's LocalLogger prints one `step:N - key:value - ...` line per log call (v0.7.0
verl/utils/logger/aggregate_logger.py, concat_dict_to_str): numbers only, each through pprint.pformat, so numpy ≥ 2
scalars read `np.float64(x)` / `np.int64(x)`. Ray puts the actor's prefix in front (`(TaskRunner pid=N)`, older
verl `(main_task pid=N)`, often in ANSI colour) and a tqdm bar may be glued before it. The DAPO trainer also
pprints `Initial validation metrics: {...}` and `Final validation metrics: {...}`, a long string wrapped into a
parenthesised run of literals (v0.7.0 recipe/dapo/dapo_ray_trainer.py).
JSONL: verl's FileLogger writes `{"step": N, "data": {...}}` per log call (v0.7.0 verl/utils/tracking.py).

A console log file is mapped (a pipe is read in large chunks) and searched for the step mark with find, in C:
only the step lines are decoded, so the rest of a log (vLLM, Ray, tqdm) costs no Python per line.
"""

from __future__ import annotations

import ast
import io
import json
import mmap
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

STEP_TIME = "timing_s/step"
CHUNK = 8 << 20
STEP = b"step:"
STEP_MARK = re.compile(rb"step:(\d+) - ([^\n]*)")
VALIDATION_MARK = b"validation metrics: "
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
ANSI_TEXT = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ANSI_BEFORE = re.compile(rb"\x1b\[[0-9;]*m$")
RAY_PREFIX = re.compile(r"^\s*\([\w.-]+ pid=\d+(?:, ip=[^)]*)?\)\s?")
DICT_ITEM = re.compile(r"""['"]([^'"]+)['"]:\s*(?:np\.\w+\()?([^,()}\s]+)""")
# a `step:` right after one of these is part of a longer name (global_step:, timing_s/step:), not a step line
WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_/")
BOOLS = {b"True": 1.0, b"False": 0.0}
MAX_BLOCK_LINES = 400


@dataclass
class StepLine:
    step: int
    metrics: dict[str, float]


@dataclass
class ValidationDump:
    label: str                       # "initial" or "final"
    metrics: dict[str, float]


@dataclass
class RunMetrics:
    """Every step's metrics (a step's lines merged; a step logged again with its own step time, as after a
    resume, replaces the earlier one: the later attempt is the one the run went on from)."""

    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    validation: dict[str, dict[str, float]] = field(default_factory=dict)
    lines: int = 0
    replayed: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    unreadable_lines: int = 0        # JSONL lines that were not a log record (a truncated or failed write)

    def add(self, line: StepLine) -> None:
        self.lines += 1
        current = self.steps.get(line.step)
        if current is None:
            self.steps[line.step] = dict(line.metrics)
        elif STEP_TIME in line.metrics and STEP_TIME in current:
            self.steps[line.step] = dict(line.metrics)
            self.replayed.append(line.step)
        else:
            current.update(line.metrics)

    def fill(self, other: RunMetrics) -> None:
        """Adds what `other` has and this lacks (the JSONL behind the console), never overriding a value."""
        for step, metrics in other.steps.items():
            target = self.steps.setdefault(step, {})
            for key, value in metrics.items():
                target.setdefault(key, value)
        for label, metrics in other.validation.items():
            self.validation.setdefault(label, metrics)
        self.unreadable_lines += other.unreadable_lines

    def ordered(self) -> list[tuple[int, dict[str, float]]]:
        return sorted(self.steps.items())


def _number(raw: bytes) -> float | int | None:
    """The value as logged: an int for an integer literal (so steps.csv writes it as it was), else a float."""
    if raw.startswith(b"np."):      # numpy >= 2: np.float64(0.5); unwrapped first, an exception per value is slow
        raw = raw[raw.find(b"(") + 1:raw.rfind(b")")]
    digits = raw.strip()
    if digits.isdigit() or (digits[:1] == b"-" and digits[1:].isdigit()):
        return int(digits)
    try:
        return float(raw)
    except ValueError:
        pass
    raw = raw.strip().split(b" ", 1)[0]     # e.g. Ray's " [repeated 2x across cluster]" after the last value
    if raw.startswith(b"np.") and raw.endswith(b")"):
        raw = raw[raw.find(b"(") + 1:-1]
    try:
        return float(raw)
    except ValueError:
        return BOOLS.get(raw)


def parse_metrics(body: bytes, keys: dict[bytes, str] | None = None) -> dict[str, float]:
    """`key:value - key:value ...` (what follows `step:N - `); values that are not numbers are left out."""
    keys = {} if keys is None else keys
    if b"\r" in body:
        body = body.split(b"\r", 1)[0]
    if b"\x1b" in body:
        body = ANSI.sub(b"", body)
    metrics: dict[str, float] = {}
    for part in body.split(b" - "):
        key, sep, raw = part.rpartition(b":")
        if not sep or not key:
            continue
        value = _number(raw)
        if value is None:
            continue
        name = keys.get(key)
        if name is None:
            name = keys[key] = key.strip().decode("utf-8", "replace")
        metrics[name] = value
    return metrics


def _starts_a_step(buf: bytes, start: int) -> bool:
    if start == 0 or buf[start - 1] not in WORD_BYTES:
        return True
    return buf[start - 1] == ord("m") and ANSI_BEFORE.search(buf, max(0, start - 16), start) is not None


def _line_at(buf: bytes, start: int, end: int) -> tuple[str, int]:
    stop = buf.find(b"\n", start, end)
    stop = end if stop < 0 else stop
    return ANSI_TEXT.sub("", buf[start:stop].decode("utf-8", "replace")).rstrip("\r"), stop + 1


def _split_prefix(text: str) -> tuple[str, str]:
    match = RAY_PREFIX.match(text)
    return (match.group(0).strip(), text[match.end():]) if match else ("", text)


def _dump_text(pieces: list[str]) -> str | None:
    """The pprinted string once its literal is complete, else None."""
    joined = "\n".join(pieces).strip()
    if not joined.startswith(("(", "'", '"')):
        return joined
    if not joined.endswith((")", "'", '"')):
        return None
    try:
        text = ast.literal_eval(joined)
    except (SyntaxError, ValueError):
        return None
    return text if isinstance(text, str) else ""


def _dump_metrics(text: str) -> dict[str, float]:
    metrics = {}
    for key, raw in DICT_ITEM.findall(text.partition("metrics: ")[2]):
        value = _number(raw.encode())
        if value is not None:
            metrics[key] = value
    return metrics


def _validation_block(buf: bytes, mark: int, end: int, final: bool) -> tuple[ValidationDump | None, int | None]:
    """The pprinted dump whose line holds `mark`: (dump, offset after it); (None, None) when it may go on past
    `end` (read more first); (None, offset) when it never closes or is not verl's."""
    start = buf.rfind(b"\n", 0, mark) + 1
    first, pos = _line_at(buf, start, end)
    prefix, content = _split_prefix(first)
    pieces = [content.rsplit("\r", 1)[-1]]
    for _ in range(MAX_BLOCK_LINES):
        text = _dump_text(pieces)
        if text is not None:
            label = next((w for w in ("Initial", "Final") if f"{w} validation metrics: " in text), None)
            return (ValidationDump(label.lower(), _dump_metrics(text)) if label else None), pos
        if pos >= end:
            return (None, end) if final else (None, None)
        line, pos = _line_at(buf, pos, end)
        line_prefix, content = _split_prefix(line)
        if line_prefix == prefix:    # another actor's lines may come in between
            pieces.append(content)
    return None, pos


def _scan(buf: bytes, end: int, final: bool, keys: dict[bytes, str]) -> tuple[list, int]:
    """Events in buf[:end] (whole lines), in the order they were printed, and how far they reach: less than `end`
    when a validation dump may continue in the next chunk. bytes.find locates the marks (C speed); a regex only
    checks what it found."""
    found: list[tuple[int, StepLine | ValidationDump]] = []
    limit, pos = end, 0
    while (start := buf.find(VALIDATION_MARK, pos, end)) >= 0:
        dump, after = _validation_block(buf, start, end, final)
        if after is None:
            limit = buf.rfind(b"\n", 0, start) + 1
            break
        if dump is not None:
            found.append((start, dump))
        pos = after
    pos = 0
    while (start := buf.find(STEP, pos, limit)) >= 0:
        match = STEP_MARK.match(buf, start, limit)
        if match is None or not _starts_a_step(buf, start):
            pos = start + len(STEP)
            continue
        found.append((start, StepLine(int(match.group(1)), parse_metrics(match.group(2), keys))))
        pos = match.end()
    found.sort(key=lambda item: item[0])
    return [event for _, event in found], limit


def _mapped(stream: BinaryIO) -> mmap.mmap | None:
    """A regular file, mapped: searched in place, with no copy into Python (pipes and buffers are read in chunks)."""
    try:
        fileno = stream.fileno()
        info = os.fstat(fileno)
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            return None
        return mmap.mmap(fileno, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, io.UnsupportedOperation):
        return None


def parse_console(stream: BinaryIO, chunk_size: int = CHUNK) -> Iterator[StepLine | ValidationDump]:
    keys: dict[bytes, str] = {}
    mapped = _mapped(stream)
    if mapped is not None:
        with mapped:
            events, _ = _scan(mapped, len(mapped), True, keys)
        yield from events
        return
    carry = b""
    while True:
        data = stream.read(chunk_size)
        buf = carry + data if carry else data
        final = not data
        end = len(buf) if final else buf.rfind(b"\n") + 1
        events, consumed = _scan(buf, end, final, keys) if end else ([], 0)
        yield from events
        carry = buf[consumed:]
        if final:
            return


def parse_jsonl(lines: Iterable[bytes | str]) -> tuple[list[StepLine], int]:
    """verl's FileLogger records, and how many lines were not one (a write cut short by a crash or a resume)."""
    records, unreadable = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step, data = record["step"], record["data"]
        except (ValueError, TypeError, KeyError):
            unreadable += 1
            continue
        if not isinstance(step, int) or not isinstance(data, dict):
            unreadable += 1
            continue
        records.append(StepLine(step, {k: v if type(v) is int else float(v) for k, v in data.items()
                                       if isinstance(v, (int, float))}))
    return records, unreadable


def looks_like_jsonl(head: bytes) -> bool:
    first = head.lstrip().split(b"\n", 1)[0]
    return first.startswith(b"{") and b'"step"' in first


def read_log(stream: BinaryIO, name: str, into: RunMetrics) -> None:
    """One console log or file-logger JSONL (told apart by its first line) into `into`."""
    head = stream.read(4096)
    stream.seek(0)
    if looks_like_jsonl(head):
        records, unreadable = parse_jsonl(stream)
        for record in records:
            into.add(record)
        into.unreadable_lines += unreadable
    else:
        for event in parse_console(stream):
            if isinstance(event, StepLine):
                into.add(event)
            elif event.metrics or event.label not in into.validation:
                into.validation[event.label] = event.metrics
    into.sources.append(name)
