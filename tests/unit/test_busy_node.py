"""site.yml's preflight refuses a node a run is using: its run lock, processes on its NPUs (dapo_ops/launch/busy.py),
read from real `npu-smi info` tables (tests/data)."""
import json
from pathlib import Path

from dapo_ops.launch import busy
from dapo_ops.launch.busy import busy_node_problems

DATA = Path(__file__).parent.parent / "data"
BUSY = (0, (DATA / "ascend" / "npu-smi-info-8npu-processes.txt").read_text())   # two processes on NPU 0
IDLE = (0, (DATA / "bundles" / "pinned" / "node" / "npu_smi_info.txt").read_text())
LOCK = json.dumps({"run_id": "r-20261206-a", "controller": "ctl", "pid": 4242, "created": "2026-12-06T04:00:00Z"})
NO_LOCK = (1, "")
NOT_INSTALLED = (127, "")


def test_an_idle_node_or_one_without_a_driver_is_not_busy():
    assert busy_node_problems(NO_LOCK, IDLE, None) == []
    assert busy_node_problems(NO_LOCK, NOT_INSTALLED, None) == []
    assert busy_node_problems((0, ""), NOT_INSTALLED, None) == []   # an empty lock file: no run holds it


def test_a_run_lock_is_refused_naming_the_run_and_how_to_go_on():
    [problem] = busy_node_problems((0, LOCK + "\n"), IDLE, None)
    assert problem.startswith("it holds the run lock of run r-20261206-a (launched from ctl, pid 4242, at "
                              "2026-12-06T04:00:00Z) (/var/lib/dapo-ops/cluster.lock)")
    assert "`dapo-ops stop r-20261206-a` ends it" in problem
    assert problem.endswith("or set dapo_provision_during_run: r-20261206-a for this node to provision it anyway")
    assert busy_node_problems((0, LOCK), BUSY, "r-20261206-a") == []   # the named run's own processes too
    assert len(busy_node_problems((0, LOCK), BUSY, "r-other")) == 2
    assert "run lock of run unknown" in busy_node_problems((0, "garbage\n"), IDLE, None)[0]


def test_processes_on_the_npus_are_refused_naming_a_few(monkeypatch):
    [problem] = busy_node_problems(NO_LOCK, BUSY, None)
    assert problem == ("2 process(es) run on its NPUs (pid 3755936 python on NPU 0, pid 3755990 on NPU 0): stop them "
                       "first, or set dapo_provision_during_run: any for this node to provision it anyway")
    monkeypatch.setattr(busy, "SHOWN", 1)
    assert "(pid 3755936 python on NPU 0 and 1 more)" in busy_node_problems(NO_LOCK, BUSY, None)[0]
    assert busy_node_problems(NO_LOCK, BUSY, "any") == []


def test_a_table_that_does_not_parse_is_not_taken_for_idle():
    [problem] = busy_node_problems(NO_LOCK, (0, "dcmi module initialize failed. ret is -8005\n"), None)
    assert problem.startswith("cannot tell whether its NPUs are in use: ")
