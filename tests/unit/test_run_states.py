"""dapo_ops/model/run.py: a run's states and the moves the run record accepts."""
import pytest

from dapo_ops.errors import DapoError
from dapo_ops.launch import records
from dapo_ops.model.run import RunState, may_move


@pytest.mark.parametrize("path", [
    ["created", "starting", "running", "succeeded", "stopped"],
    ["created", "starting", "rehearsed"],
    ["created", "failed", "failed"],
    ["created", "starting", "running", "failed"],
    ["created", "starting", "stopped"],
])
def test_the_launch_paths_are_allowed(path):
    assert all(may_move(a, b) for a, b in zip(path, path[1:]))


@pytest.mark.parametrize("current, new", [("failed", "running"), ("stopped", "running"), ("rehearsed", "failed"),
                                          ("succeeded", "failed"), ("created", "running"), ("running", "bogus"),
                                          ("bogus", "failed")])
def test_a_move_back_or_to_an_unknown_state_is_refused(current, new):
    assert not may_move(current, new)


def test_the_record_refuses_a_move_it_does_not_know_and_stores_the_string(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "RUNS_DIR", tmp_path)
    record = records.RunRecord(run_id="r1", job="j", nodes=["n1"], head="n1", head_address="10.0.0.1",
                               dashboard="http://127.0.0.1:8265", node_dir="/var/lib/dapo-ops/runs/r1")
    (tmp_path / "r1").mkdir()
    record.mark(RunState.STARTING)
    record.mark("running")
    with pytest.raises(DapoError, match="run r1 is running: it cannot become created"):
        record.mark("created")
    assert '"state": "running"' in (tmp_path / "r1" / "run.json").read_text()
    assert records.load_run("r1").state == RunState.RUNNING
