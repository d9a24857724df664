"""The report's numbers against values computed by hand from the fixtures' three steps
(tests/data/report/make_fixtures.py STEPS):

step  time   gen  old_log_prob  ref  update_actor  tokens   tokens/s  throughput (÷32 NPUs)  mfu
1     100     60            10    5            20  320000   3200      100                    0.20
2     200    140            20   10            25  480000   2400       75                    0.30
3     150    100            15   10            20  600000   4000      125                    0.25
"""

from pathlib import Path

import pytest

from dapo_ops.report.steps import RunMetrics, StepLine, read_log
from dapo_ops.report.summary import SEED, baseline_from_summary, compare, percentile, summarize

DATA = Path(__file__).resolve().parents[1] / "data" / "report"


def summary_of(*names: str, npus=None) -> dict:
    run = RunMetrics()
    for name in names:
        with open(DATA / name, "rb") as stream:
            read_log(stream, name, run)
    return summarize(run, npus)


def test_percentiles_interpolate_between_ranks():
    assert percentile([], 0.5) is None
    assert percentile([7.0], 0.9) == 7.0
    assert percentile([100.0, 200.0, 150.0], 0.5) == 150.0
    assert percentile([100.0, 200.0, 150.0], 0.9) == pytest.approx(190.0)      # 150 + 0.8 × (200 − 150)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5


@pytest.mark.parametrize("names", [("plain.log",), ("numpy2.log",), ("tqdm_glued.log",), ("validation.log",),
                                   ("resume-1.log", "resume-2.log"), ("metrics.jsonl",)])
def test_numbers_equal_the_hand_computed_ones(names):
    s = summary_of(*names)
    assert s["steps"]["trained"] == 3 and (s["steps"]["first"], s["steps"]["last"]) == (1, 3)
    assert s["step_time_s"] == {"median": 150.0, "p90": pytest.approx(190.0), "mean": 150.0, "total": 450.0}
    tokens = s["tokens_per_s"]
    assert tokens["overall"] == pytest.approx(1_400_000 / 450)                  # 3111.1
    assert tokens["median"] == 3200.0
    assert tokens["npus"] == 32                                                 # tokens / (time × throughput)
    assert tokens["per_npu"] == pytest.approx(1_400_000 / 450 / 32)             # 97.2
    assert s["mfu"] == {"actor_median": 0.25, "peak_tflops": 354.0, "actor_tflops_per_npu": pytest.approx(88.5)}
    split = s["time_split"]
    assert split["gen"] == {"median": 100.0, "share": pytest.approx(300 / 450)}
    assert split["old_log_prob"] == {"median": 15.0, "share": pytest.approx(45 / 450)}
    assert split["ref"] == {"median": 10.0, "share": pytest.approx(25 / 450)}
    assert split["update_actor"] == {"median": 20.0, "share": pytest.approx(65 / 450)}
    assert split["other"] == {"median": 5.0, "share": pytest.approx(15 / 450)}   # 100 − 95, 200 − 195, 150 − 145
    assert "update_weights" not in split
    m = s["metrics"]
    assert m["num_gen_batches"]["mean"] == pytest.approx(4 / 3) and m["num_gen_batches"]["max"] == 2
    assert (m["score"]["first"], m["score"]["last"], m["score"]["max"]) == (-0.5, 0.25, 0.25)
    assert (m["response_length"]["median"], m["response_clip_ratio"]["mean"]) == (1100.0, pytest.approx(0.1))
    assert (m["entropy"]["first"], m["entropy"]["last"]) == (0.5, 0.3)
    assert "timing_s/update_weights" in s["missing"] and "timing_s/step" not in s["missing"]


def test_validation_scores_and_what_was_not_logged():
    s = summary_of("validation.log")
    assert s["validation"]["scores"] == {"val-core/math_dapo/acc/mean@1": {"first": (0, 0.125), "last": (3, 0.375),
                                                                           "best": (3, 0.375)}}
    assert s["validation"]["dumps"]["final"]["val-core/math_dapo/acc/mean@1"] == 0.375
    assert s["steps"]["logged"] == 5                      # 0 (validation only) … 4 (the checkpoint's line)
    assert s["missing"] == ["timing_s/update_weights"]
    assert "val-core/*" in summary_of("plain.log")["missing"]


def test_update_weights_is_split_out_when_logged_and_npus_can_be_given():
    run = RunMetrics()
    run.add(StepLine(1, {"timing_s/step": 10.0, "timing_s/gen": 4.0, "timing_s/update_weights": 2.0,
                         "perf/total_num_tokens": 1000}))
    s = summarize(run, npus=8)
    assert s["time_split"]["update_weights"] == {"median": 2.0, "share": 0.2}
    assert s["time_split"]["other"] == {"median": 4.0, "share": 0.4}
    assert s["tokens_per_s"] == {"overall": 100.0, "median": 100.0, "npus": 8, "per_npu": 12.5}
    assert s["mfu"] is None


def test_a_run_without_perf_metrics_still_summarises():
    s = summary_of("dry_mode.log")
    assert s["steps"]["trained"] == 0 and s["steps"]["logged"] == 1
    assert s["step_time_s"] is None and s["tokens_per_s"] is None and s["time_split"] == {}
    assert s["missing"][0] == "timing_s/step" and len(s["missing"]) == 15


def test_against_the_seed_and_against_another_run():
    s = summary_of("plain.log")
    seed = compare(s, dict(SEED))
    assert seed["baseline"] == "seed"
    assert seed["figures"]["step_time_s"] == {"run": 150.0, "baseline": 1.2, "ratio": pytest.approx(125.0)}
    assert seed["figures"]["tokens_per_s"]["ratio"] == pytest.approx(1_400_000 / 450 / 12800)
    assert seed["figures"]["tokens_per_s_per_npu"]["baseline"] == 400.0          # 12,800 / 32
    other = compare(s, baseline_from_summary(s, "same"))
    assert all(f["ratio"] == pytest.approx(1.0) for f in other["figures"].values())
