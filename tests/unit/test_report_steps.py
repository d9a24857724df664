"""The step-line parser on each documented variant (fixtures: tests/data/report/make_fixtures.py)."""

import io
from pathlib import Path

import pytest

from dapo_ops.report.steps import (RunMetrics, StepLine, ValidationDump, looks_like_jsonl, parse_console,
                                   parse_jsonl, parse_metrics, read_log)

DATA = Path(__file__).resolve().parents[1] / "data" / "report"
VARIANTS = ["plain.log", "numpy2.log", "main_task.log", "tqdm_glued.log", "validation.log", "metrics.jsonl"]


def read(*names: str) -> RunMetrics:
    run = RunMetrics()
    for name in names:
        with open(DATA / name, "rb") as stream:
            read_log(stream, name, run)
    return run


@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_gives_the_same_three_steps(name):
    run = read(name)
    trained = {step: m for step, m in run.steps.items() if "timing_s/step" in m}
    assert sorted(trained) == [1, 2, 3]
    assert [trained[s]["timing_s/step"] for s in (1, 2, 3)] == [100.0, 200.0, 150.0]
    assert [trained[s]["perf/total_num_tokens"] for s in (1, 2, 3)] == [320000, 480000, 600000]
    assert trained[1]["critic/score/mean"] == -0.5
    assert trained[2]["train/num_gen_batches"] == 2
    assert trained[3]["prompt_length/max"] == 512          # np.int64(512) in the numpy 2 variant
    assert trained[1]["actor/lr"] == 1e-06
    assert trained[1]["perf/throughput"] == 100.0
    assert len(trained[1]) == 31                             # every key of the line, none lost to the prefix
    assert run.replayed == []


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
@pytest.mark.parametrize("name", ["plain.log", "tqdm_glued.log", "validation.log"])
def test_chunk_boundaries_change_nothing(name, chunk):
    """A pipe is read in chunks, a file mapped whole: the same events either way."""
    data = (DATA / name).read_bytes()
    with open(DATA / name, "rb") as mapped:
        whole = list(parse_console(mapped))
    assert list(parse_console(io.BytesIO(data), chunk_size=chunk)) == whole
    assert len(whole) >= 3


def test_numpy_scalars_ansi_and_other_values():
    body = (b"a:np.float64(0.5) - b:np.int64(3) - c:-0.25 - d:1e-05 - e:nan - f:True - g:None - h:'text' - "
            b"i:np.float64(-inf) - j:2.5\x1b[0m [repeated 2x across cluster]\r")
    metrics = parse_metrics(body)
    assert metrics["a"] == 0.5 and metrics["b"] == 3 and metrics["c"] == -0.25 and metrics["d"] == 1e-05
    assert metrics["e"] != metrics["e"]                      # nan
    assert metrics["f"] == 1.0 and metrics["i"] == float("-inf") and metrics["j"] == 2.5
    assert "g" not in metrics and "h" not in metrics


def test_a_longer_name_ending_in_step_is_not_a_step_line():
    log = (b"saving global_step:2 - x:1\n"
           b"timing_s/step:3 - y:1\n"
           b"\x1b[36m(TaskRunner pid=1)\x1b[0mstep:5 - z:1\n"
           b"[00:10, 10.0s/it]step:6 - w:2\n")
    events = list(parse_console(io.BytesIO(log)))
    assert events == [StepLine(5, {"z": 1.0}), StepLine(6, {"w": 2.0})]


def test_validation_dumps_are_read_and_another_actors_lines_skipped():
    run = read("validation.log")
    assert run.validation["initial"]["val-core/math_dapo/acc/mean@1"] == 0.125
    assert run.validation["final"] == {"val-core/math_dapo/acc/mean@1": 0.375,
                                       "val-aux/math_dapo/score/mean@1": -0.75,
                                       "val-aux/math_dapo/reward/mean@1": -0.75,
                                       "val-aux/math_dapo/acc/best@4/mean": 0.5}
    assert run.steps[0] == {"val-core/math_dapo/acc/mean@1": 0.125, "val-aux/math_dapo/score/mean@1": -0.75,
                            "val-aux/math_dapo/reward/mean@1": -0.75, "val-aux/math_dapo/acc/best@4/mean": 0.5}
    assert run.steps[4] == {"timing/save_checkpoint": 12.5}
    assert run.steps[2]["val-core/math_dapo/acc/mean@1"] == 0.25


def test_unwrapped_and_unfinished_dumps():
    log = (b"(TaskRunner pid=1) 'Initial validation metrics: {\\'val-core/x\\': 0.5}'\n"
           b"(TaskRunner pid=1) Final validation metrics: None\n"
           b"(TaskRunner pid=1) ('Final validation metrics: {'\n")
    events = list(parse_console(io.BytesIO(log)))
    assert events == [ValidationDump("initial", {"val-core/x": 0.5}), ValidationDump("final", {})]


def test_a_resume_replays_a_step_and_the_later_attempt_wins():
    run = read("resume-1.log", "resume-2.log")
    assert run.replayed == [3]
    assert run.steps[3]["timing_s/step"] == 150.0
    assert run.steps[2]["timing_s/step"] == 200.0            # the resumed job's validation merged into step 2
    assert run.steps[2]["val-core/math_dapo/acc/mean@1"] == 0.25
    assert run.lines == 5


def test_jsonl_cut_short_and_numpy_free():
    records, unreadable = parse_jsonl([b'{"step": 1, "data": {"a": 1, "b": "x", "c": 2.5}}', b"",
                                       b'{"step": "2", "data": {}}', b'[1, 2]', b'{"step": 3, "data": {"a'])
    assert records == [StepLine(1, {"a": 1.0, "c": 2.5})]
    assert unreadable == 3
    assert read("metrics.jsonl").unreadable_lines == 1
    assert looks_like_jsonl(b'\n{"step": 0, "data": {}}\n') and not looks_like_jsonl(b"step:0 - a:1\n")


def test_the_jsonl_fills_what_the_console_lacks_without_overriding_it():
    console = RunMetrics()
    console.add(StepLine(1, {"a": 1.0}))
    jsonl = RunMetrics()
    jsonl.add(StepLine(1, {"a": 9.0, "b": 2.0}))
    jsonl.add(StepLine(2, {"a": 3.0}))
    console.fill(jsonl)
    assert console.steps == {1: {"a": 1.0, "b": 2.0}, 2: {"a": 3.0}}


def test_the_sims_dry_mode_and_a_log_without_steps():
    dry = read("dry_mode.log")
    assert dry.steps == {0: {"dapo_ops/dry_mode": 1.0, "dapo_ops/model_layers": 48.0, "dapo_ops/nnodes": 2.0,
                             "dapo_ops/n_gpus_per_node": 16.0}}
    empty = read("no_steps.log")
    assert empty.lines == 0 and empty.steps == {} and empty.validation == {}


def test_the_fixtures_are_what_their_generator_writes(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures", DATA / "make_fixtures.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    monkeypatch.setattr(generator, "HERE", tmp_path)
    generator.main()
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in DATA.iterdir() if p.suffix in (".log", ".jsonl"))
    assert all((tmp_path / name).read_bytes() == (DATA / name).read_bytes() for name in written)
