"""Every step's metrics as a table for pandas and spreadsheets (pure): steps.csv, one row per step and one column
per metric (in the order the metrics were first logged), and steps.jsonl, one JSON object per step.

A value is the number as logged: an integer as an integer, a float as Python's shortest repr of the float read
(what verl printed, since it prints Python floats: `1.0` stays `1.0`; numpy's `np.float64(x)` is unwrapped), and
booleans (`True`, `False`) as 1.0 and 0.0. A metric a step did not log is an empty cell in the CSV and absent from
the step's JSON object. NaN and infinities are `nan`, `inf`, `-inf` in the CSV (pandas reads them back), null in the JSON lines
(strict JSON has no NaN)."""

from __future__ import annotations

import csv
import io
import json
import math

from dapo_ops.report.steps import RunMetrics

STEP = "step"


def columns(run: RunMetrics) -> list[str]:
    """"step", then every metric in the order it was first logged (the first step's order, then new ones)."""
    seen: dict[str, None] = {}
    for _, metrics in run.ordered():
        seen.update(dict.fromkeys(metrics))
    seen.pop(STEP, None)
    return [STEP, *seen]


def as_logged(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def _json_value(value: float | int) -> float | int | None:
    return value if isinstance(value, int) or math.isfinite(value) else None


def steps_csv(run: RunMetrics) -> str:
    names = columns(run)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for step, metrics in run.ordered():
        writer.writerow([str(step), *(as_logged(metrics[n]) if n in metrics else "" for n in names[1:])])
    return out.getvalue()


def step_records(run: RunMetrics) -> list[dict]:
    """One object per step: {"step": N, metric: value, ...} (what --json carries)."""
    names = columns(run)[1:]
    return [{STEP: step, **{n: _json_value(metrics[n]) for n in names if n in metrics}}
            for step, metrics in run.ordered()]


def steps_jsonl(run: RunMetrics) -> str:
    return "".join(json.dumps(record, allow_nan=False) + "\n" for record in step_records(run))
