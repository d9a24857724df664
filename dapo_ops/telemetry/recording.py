"""A run's hardware record: `hardware.jsonl` in the run's directory, one line per fleet sample that `top RUN` or
`watch` took, read back by `report` to plot the hardware under the steps.

Each line holds per node its chips as compact rows, about 50 bytes per NPU ([npu, chip, device, AICore %, temp C,
power W, HBM used MB, HBM total MB, health, AICore MHz, rated MHz]; the frequencies as last read, null before the
first read) or its error, the run's step when known, and the alerts raised."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

from dapo_ops.telemetry.alerts import Alert
from dapo_ops.telemetry.model import FleetSample, NodeSample, NpuReading, RunProgress

FILE_NAME = "hardware.jsonl"
_ROW = ("npu", "chip", "device", "aicore_pct", "temp_c", "power_w", "hbm_used_mb", "hbm_total_mb", "health",
        "aicore_mhz", "rated_mhz")


def line(sample: FleetSample) -> str:
    nodes = {}
    for node in sample.nodes:
        nodes[node.node] = ({"error": node.error} if not node.ok else
                            {"npus": [[getattr(r, f) for f in _ROW] for r in node.npus]})
    record = {"at": round(sample.at, 3), "step": sample.run.step if sample.run else None, "nodes": nodes,
              "alerts": [a.document() for a in sample.alerts]}
    return json.dumps(record, separators=(",", ":"))


def append(path: Path, sample: FleetSample) -> None:
    """One line, written whole with O_APPEND (top and watch may record the same run at once)."""
    data = (line(sample) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _is_optional_number(value) -> bool:
    return value is None or _is_number(value)


_ROW_TYPES = {"npu": _is_int, "chip": _is_int, "device": _is_int, "aicore_pct": _is_optional_number,
              "temp_c": _is_optional_number, "power_w": _is_optional_number, "hbm_used_mb": _is_int,
              "hbm_total_mb": _is_int, "health": lambda v: isinstance(v, str),
              "aicore_mhz": _is_optional_number, "rated_mhz": _is_optional_number}


def _reading(row) -> NpuReading:
    if not isinstance(row, list) or not 9 <= len(row) <= len(_ROW):
        raise ValueError("not a row")
    values = dict(zip(_ROW, row))
    if not all(_ROW_TYPES[key](value) for key, value in values.items()):
        raise ValueError("a row's values are not of their types")
    return NpuReading(name="", **values)


def _alert(entry) -> Alert:
    fields = ("severity", "code", "node", "message", "check")
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in fields) or not (
            entry.get("npu") is None or _is_int(entry.get("npu"))):
        raise ValueError("not an alert")
    return Alert(*(entry[k] for k in fields[:3]), entry.get("npu"), *(entry[k] for k in fields[3:]))


def _sample(record) -> FleetSample:
    at, step, nodes = record.get("at"), record.get("step"), record.get("nodes")
    if not _is_number(at) or not (step is None or _is_int(step)) or not isinstance(nodes, dict):
        raise ValueError("not a sample")
    parsed = []
    for name, entry in nodes.items():
        if isinstance(entry, dict) and isinstance(entry.get("error"), str):
            parsed.append(NodeSample(name, float(at), error=entry["error"]))
        elif isinstance(entry, dict) and isinstance(entry.get("npus"), list):
            parsed.append(NodeSample(name, float(at), tuple(_reading(r) for r in entry["npus"])))
        else:
            raise ValueError("not a node")
    alerts = record.get("alerts", [])
    if not isinstance(alerts, list):
        raise ValueError("not a list of alerts")
    run = RunProgress("", "", step=step) if step is not None else None
    return FleetSample(float(at), tuple(parsed), run, tuple(_alert(a) for a in alerts))


def iter_samples(path: Path) -> Iterator[FleetSample | None]:
    """Each line's sample, in file order, or None for a line that is not one (cut short by a crash, not ours, or
    with values of the wrong type); one line at a time, whatever the file's size."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for text in handle:
            try:
                record = json.loads(text)
                yield _sample(record) if isinstance(record, dict) else None
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
                yield None


def read(path: Path) -> tuple[list[FleetSample], int]:
    """The samples in time order, and how many lines were not a sample."""
    samples, bad = [], 0
    for sample in iter_samples(path):
        if sample is None:
            bad += 1
        else:
            samples.append(sample)
    return sorted(samples, key=lambda s: s.at), bad
