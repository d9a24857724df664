"""steps.csv and steps.jsonl: every step's logged values, one row (object) per step, read back by the csv module
and pandas-compatible; the console's and the file logger's variants give the same table."""

import csv
import io
import json
from pathlib import Path

import pytest

from dapo_ops.report.step_table import as_logged, columns, step_records, steps_csv, steps_jsonl
from dapo_ops.report.steps import RunMetrics, StepLine, read_log

DATA = Path(__file__).resolve().parents[1] / "data" / "report"


def read(name: str) -> RunMetrics:
    run = RunMetrics()
    with open(DATA / name, "rb") as stream:
        read_log(stream, name, run)
    return run


def test_a_row_per_step_a_column_per_metric_in_the_order_first_logged():
    run = RunMetrics()
    run.add(StepLine(2, {"b": 0.25, "a": 3}))
    run.add(StepLine(1, {"b": 1e-06, "c": float("nan")}))
    assert columns(run) == ["step", "b", "c", "a"]
    rows = list(csv.reader(io.StringIO(steps_csv(run))))
    assert rows == [["step", "b", "c", "a"], ["1", "1e-06", "nan", ""], ["2", "0.25", "", "3"]]


def test_jsonl_is_strict_json_with_missing_metrics_absent_and_nan_as_null():
    run = RunMetrics()
    run.add(StepLine(1, {"x": float("inf"), "y": 2.0}))
    run.add(StepLine(2, {"y": 0.1}))
    lines = [json.loads(line) for line in steps_jsonl(run).splitlines()]
    assert lines == [{"step": 1, "x": None, "y": 2.0}, {"step": 2, "y": 0.1}]
    assert step_records(run) == lines


@pytest.mark.parametrize("value,text", [(0.1, "0.1"), (320000, "320000"), (-0.5, "-0.5"), (1e-06, "1e-06"),
                                        (2.5e20, "2.5e+20"), (float("-inf"), "-inf"), (1.0, "1.0"), (-3, "-3")])
def test_a_value_is_written_as_python_printed_it(value, text):
    assert as_logged(value) == text
    assert float(text) == value


@pytest.mark.parametrize("name", ["plain.log", "numpy2.log", "tqdm_glued.log", "metrics.jsonl"])
def test_every_log_variant_gives_a_table_of_the_values_logged(name):
    run = read(name)
    rows = list(csv.DictReader(io.StringIO(steps_csv(run))))
    trained = [r for r in rows if r["timing_s/step"]]
    assert [r["step"] for r in trained] == ["1", "2", "3"]
    assert [float(r["timing_s/step"]) for r in trained] == [100, 200, 150]
    assert [r["perf/total_num_tokens"] for r in trained] == ["320000", "480000", "600000"]
    assert trained[0]["critic/score/mean"] == "-0.5"
    assert len(rows) == len(run.steps)
