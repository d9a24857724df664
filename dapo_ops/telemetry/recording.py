"""A run's hardware record: `hardware.jsonl` in the run's directory, one line per fleet sample that `top RUN` or
`watch` took, read back by `report` to plot the hardware under the steps.

Each line holds per node its chips as compact rows, about 50 bytes per NPU ([npu, chip, device, AICore %, temp C,
power W, HBM used MB, HBM total MB, health, AICore MHz, rated MHz]; the frequencies null between the samples that
read them) or its error, the run's step when known, and the alerts raised."""

from __future__ import annotations

import json
import os
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


def _reading(row: list) -> NpuReading:
    if not 9 <= len(row) <= len(_ROW):
        raise ValueError(f"a row of {len(row)} values")
    return NpuReading(name="", **dict(zip(_ROW, row)))


def _sample(record: dict) -> FleetSample:
    nodes = []
    for name, entry in record["nodes"].items():
        if "error" in entry:
            nodes.append(NodeSample(str(name), float(record["at"]), error=str(entry["error"])))
        else:
            nodes.append(NodeSample(str(name), float(record["at"]), tuple(_reading(r) for r in entry["npus"])))
    alerts = tuple(Alert(a["severity"], a["code"], a["node"], a["npu"], a["message"], a["check"])
                   for a in record.get("alerts", []))
    step = record.get("step")
    run = RunProgress("", "", step=step) if isinstance(step, int) else None
    return FleetSample(float(record["at"]), tuple(nodes), run, alerts)


def read(path: Path) -> tuple[list[FleetSample], int]:
    """The samples in time order, and how many lines were not a sample (cut short by a crash, or not ours)."""
    samples, bad = [], 0
    with open(path, encoding="utf-8", errors="replace") as handle:
        for text in handle:
            try:
                samples.append(_sample(json.loads(text)))
            except (ValueError, KeyError, TypeError, AttributeError):
                bad += 1
    return sorted(samples, key=lambda s: s.at), bad
