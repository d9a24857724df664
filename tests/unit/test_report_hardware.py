"""The report's hardware section: steps placed in time from the samples that saw them, slow steps and the alerts
raised while they ran."""

import math

import pytest

from dapo_ops.report.hardware import alerts_during, place_steps, points, section
from dapo_ops.report.steps import RunMetrics, StepLine
from dapo_ops.telemetry.alerts import Alert
from dapo_ops.telemetry.model import FleetSample, NodeSample, NpuReading, RunProgress


def sample(at, step=None, temp=50, alerts=()):
    reading = NpuReading(0, 0, 0, "910B3", "OK", 80, 1000, 65536, temp, 300.0)
    return FleetSample(at, (NodeSample("node1", at, (reading,)),),
                       RunProgress("r", "running", step=step) if step is not None else None, tuple(alerts))


HOT = Alert("warning", "npu-hot", "node1", 0, "node1 NPU 0 is at 97 C", "cooling")


def run_of(times):
    run = RunMetrics()
    for step, seconds in enumerate(times, 1):
        run.add(StepLine(step, {"timing_s/step": seconds}))
    return run


def test_the_tightest_sample_places_the_steps():
    steps = [(1, 10.0), (2, 10.0), (3, 30.0)]
    # seen at 1030 with step 2 logged (ended by 1030 - 20 = 1010 at the latest), at 1070 with step 3 (<= 1020)
    # step 2 first seen ended at 1030, step 3 at 1070: each is laid back from its own anchor
    placed = place_steps(steps, points([sample(1030, step=2), sample(1070, step=3), sample(1040)]))
    assert [(p.step, p.start, p.end) for p in placed] == [(1, 1010, 1020), (2, 1020, 1030), (3, 1040, 1070)]
    assert place_steps(steps, points([sample(1030), sample(1040, step=0)])) == []   # no sample saw a step end


def test_a_slow_step_carries_the_alerts_sampled_while_it_ran():
    run = run_of([10, 10, 10, 30, 10])
    samples = [sample(1000 + t, step=s, temp=97 if 35 <= t <= 55 else 50, alerts=(HOT,) if 35 <= t <= 55 else ())
               for t, s in ((5, 0), (15, 1), (25, 2), (35, 3), (45, 3), (55, 3), (65, 4), (75, 5))]
    found = section(run, points(samples))
    assert found["steps_placed"] and found["median_step_s"] == 10
    assert [(s["step"], s["seconds"], s["ratio"]) for s in found["slow_steps"]] == [(4, 30.0, 3.0)]
    assert [a["code"] for a in found["slow_steps"][0]["alerts"]] == ["npu-hot"]
    assert found["samples"] == 8 and found["nodes"] == ["node1"]
    assert section(run, points(samples), margin=2.5)["slow_steps"] == []


def test_samples_without_steps_place_nothing_and_alerts_are_listed_once_errors_first():
    error = Alert("error", "no-sample", "node2", None, "node2: no npu-smi sample", "ssh")
    samples = points([sample(1000, alerts=(HOT,)), sample(1010, alerts=(HOT, error))])
    found = section(run_of([10, 30]), samples)
    assert not found["steps_placed"] and found["slow_steps"] == []
    assert [a["code"] for a in found["alerts"]] == ["no-sample", "npu-hot"]
    assert alerts_during(samples, 1005, 1009) == []


@pytest.mark.parametrize("times", [[], [5.0]])
def test_too_few_steps_for_a_median_are_not_slow(times):
    assert section(run_of(times), points([sample(1000, step=1)]))["slow_steps"] == []


def test_untimed_gaps_between_steps_do_not_add_up_along_the_run():
    """100 steps of 10 s with 1 s no step time counts between them, the log read every 30 s: each step is placed
    within one read interval of where it ran (one start for all would put step 100 99 s early)."""
    ends = {s: 1000 + 11 * s - 1 for s in range(1, 101)}      # step s runs [1000 + 11(s-1), 1000 + 11s - 1]
    seen = [sample(t, step=max((s for s, end in ends.items() if end <= t), default=0))
            for t in range(1000, 2120, 30)]
    placed = place_steps([(s, 10.0) for s in range(1, 101)], points(seen))
    assert max(abs(p.end - ends[p.step]) for p in placed) <= 30


def test_step_times_that_are_not_positive_numbers_are_left_out():
    found = section(run_of([10, float("nan"), float("inf"), -5, 10, 30]), points([sample(1100, step=6)]))
    assert found["median_step_s"] == 10 and [s["step"] for s in found["slow_steps"]] == [6]
    assert all(math.isfinite(v) for s in found["slow_steps"] for v in (s["start"], s["end"], s["ratio"]))
