"""A run whose launcher was killed (SIGKILL, a crash) is marked failed the next time the records are read."""

import os
import socket
import subprocess

from dapo_ops.launch import records
from dapo_ops.launch.locks import process_start


def record(tmp_path, monkeypatch, launcher, state="starting"):
    monkeypatch.setattr(records, "RUNS_DIR", tmp_path)
    run = records.RunRecord(run_id="r1", job="j", nodes=["node1"], head="node1", head_address="10.0.0.1",
                            dashboard="http://10.0.0.1:8265", node_dir="/var/lib/dapo-ops/runs/r1", launcher=launcher)
    run.mark("created")
    if state != "created":
        run.mark(state)
    return run


def test_a_killed_launcher_marks_its_run_failed_with_the_clean_up(tmp_path, monkeypatch):
    dead = subprocess.Popen(["true"])
    dead.wait()
    record(tmp_path, monkeypatch, {"host": socket.gethostname(), "pid": dead.pid, "pid_start": 12345})
    [run] = records.all_runs()
    assert run.state == "failed"
    assert run.reason == (f"its launcher (pid {dead.pid}) was killed before the launch ended; `dapo-ops stop r1` "
                          "stops what it started and frees its nodes")
    assert records.load_run("r1").state == "failed"  # recorded, not only reported


def test_a_live_launcher_or_another_controllers_run_is_left_alone(tmp_path, monkeypatch):
    me = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": process_start(os.getpid())}
    record(tmp_path, monkeypatch, me)
    assert records.load_run("r1").state == "starting"
    record(tmp_path, monkeypatch, dict(me, host="another-controller", pid=1, pid_start=0))
    assert records.load_run("r1").state == "starting"
    record(tmp_path, monkeypatch, dict(me, pid_start=me["pid_start"] + 1), state="created")  # the pid was reused
    run = records.load_run("r1")
    assert run.state == "failed" and run.reason.endswith("was killed before the launch ended")
