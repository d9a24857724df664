"""Issue 29 on the simulated fleet: a run that checkpoints, loses a node, and goes on with `launch --resume` from its
last step complete on every node, on the same nodes; a step written on one node only is not used. The sim's verl
saves and resumes as verl does on disk (dapo_sim/assets/verl_checkpoints.py)."""

import json
import subprocess
import sys
import time

import pytest
import yaml

from dapo_ops.fleet.ssh import run_on
from dapo_ops.paths import PROJECT_ROOT

from .helpers import hosts, sh

JOB = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"
ROOT = "/var/lib/dapo-ops/checkpoints/verl-dapo/qwen3-30b-a3b-dapo"



def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dapo_ops.cli", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def fleet(site_fleet):
    """The 2 x 16 fleet site.yml provisioned (shared with test_provision and test_launch), the job's data staged."""
    site_fleet.ensure()
    staged = subprocess.run([sys.executable, "-m", "dapo_sim", "stage", str(JOB)], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, timeout=600)
    assert staged.returncode == 0, staged.stderr
    return hosts()


def links(state: str) -> None:
    for link in ("dapo2n", "data0"):  # the management and the training network
        subprocess.run(["ip", "netns", "exec", "dapo-node2", "ip", "link", "set", link, state], check=True)


def record_of(run_id: str) -> dict:
    return next(r for r in json.loads(cli("runs", "--json").stdout) if r["run_id"] == run_id)


def wait_for(what, seconds: float, every: float = 2):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {seconds} s")


def test_a_run_cut_off_after_a_checkpoint_resumes_from_its_last_complete_step_on_the_same_nodes(fleet, tmp_path,
                                                                                                  runs_dir):
    spec = yaml.safe_load(JOB.read_text())
    spec["trainer"]["save_freq"] = 2
    spec["env"].setdefault("extra", {})["DAPO_SIM_TRAIN_SECONDS"] = "600"
    job = tmp_path / "checkpointing.yaml"
    job.write_text(yaml.safe_dump(spec))
    launched = cli("launch", str(job), "--nodes", "2", "--no-audit", "--json")
    assert launched.returncode == 0, launched.stderr
    first = json.loads(launched.stdout)["run_id"]
    resumed = None
    try:
        # status reads every node: a step is complete once both nodes hold their 16 ranks' shards
        said = wait_for(lambda: (s := cli("status", first)).returncode == 0 and "last complete step 4 (ranks 0-15 on "
                        "node1, ranks 16-31 on node2)" in s.stdout and s.stdout, 120)
        assert "checkpoints: last complete step 4" in said
        links("down")
        try:
            watched = cli("watch", first, "--interval", "2", timeout=240)
            assert watched.returncode == 1 and "node2 lost during training" in watched.stderr, watched.stderr
            # the job's console, kept before Ray was stopped on node1: the report of the chain reads its steps
            assert "step:4 - training/global_step:4" in (runs_dir / first / "console.log").read_text()
            # node2 is gone: its ranks' shards cannot be counted, so no step is known complete
            unknown = cli("status", first)
            assert "checkpoints: not known while node2 cannot be read" in unknown.stdout, unknown.stdout
            # the step after the last complete one, written on node1 only (node2 was cut off while saving it)
            last = max(int(line.rsplit("_", 1)[1]) for line in
                       sh(fleet["node1"], f"ls -d {ROOT}/{first}/global_step_*").stdout.split())
            half = last + 2
            sh(fleet["node1"], f"cp -r {ROOT}/{first}/global_step_{last} {ROOT}/{first}/global_step_{half}")
        finally:
            links("up")
        wait_for(lambda: not run_on(fleet["node2"], "true", timeout=10).error, 60, every=1)
        status = cli("status", first)
        complete = record_of(first)["saved"]["last_complete"]
        assert complete is not None and complete < half, status.stdout
        assert f"step {half} incomplete: model shard of rank(s) 16-31" in status.stdout, status.stdout
        again = cli("launch", "--resume", first, "--no-audit", "--json")
        assert again.returncode == 0, again.stderr
        resumed = json.loads(again.stdout)
        assert resumed["resumed_from"] == first and resumed["resume_step"] == complete
        assert resumed["chain"] == first and resumed["checkpoint_root"] == f"{ROOT}/{first}"
        overrides = (runs_dir / resumed["run_id"] / "rendered" / "overrides.txt").read_text().splitlines()
        assert "trainer.resume_mode=resume_path" in overrides
        assert f"trainer.resume_from_path={ROOT}/{first}/global_step_{complete}" in overrides
        logs = wait_for(lambda: (out := cli("logs", resumed["run_id"]).stdout) and f"step:{complete + 3} " in out
                        and out, 120)
        assert f"Setting global step to {complete}" in logs
        assert f"Resuming from {ROOT}/{first}/global_step_{complete}" in logs
        assert f"step:{complete + 1} - training/global_step:{complete + 1}" in logs
        stopped = cli("stop", resumed["run_id"])
        assert stopped.returncode == 0, stopped.stderr
        report = cli("report", resumed["run_id"], "--json", "--out", str(tmp_path / "report"))
        assert report.returncode == 0, report.stderr
        steps = json.loads(report.stdout)["summary"]["steps"]
        # one sequence over both attempts: every step once, from 1; only the lost work after the step resumed from
        # was done again
        assert steps["first"] == 1 and steps["trained"] == steps["last"] >= complete + 3, steps
        assert all(complete < step for step in steps["replayed"]), steps
    finally:
        for run_id in (first, resumed and resumed["run_id"]):
            if run_id and record_of(run_id)["state"] == "running":
                cli("stop", run_id)


def test_watch_resume_on_failure_waits_for_the_lost_node_and_resumes_by_itself(fleet, tmp_path):
    spec = yaml.safe_load(JOB.read_text())
    spec["trainer"]["save_freq"] = 2
    spec["env"].setdefault("extra", {})["DAPO_SIM_TRAIN_SECONDS"] = "600"
    job = tmp_path / "checkpointing.yaml"
    job.write_text(yaml.safe_dump(spec))
    launched = cli("launch", str(job), "--nodes", "2", "--no-audit", "--json")
    assert launched.returncode == 0, launched.stderr
    first = json.loads(launched.stdout)["run_id"]
    watcher, attempt = None, None
    try:
        wait_for(lambda: "last complete step 2 " in cli("status", first).stdout, 120)
        watcher = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "watch", first, "--interval", "2",
                                    "--resume-on-failure", "1", "--wait-for-nodes", "300"], cwd=PROJECT_ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        links("down")
        said = []
        try:
            for line in watcher.stdout:
                said.append(line)
                if "waiting for node2 to answer again" in line:
                    break
        finally:
            links("up")
        assert any(f"{first} failed (node2 lost during training" in line for line in said), said
        for line in watcher.stdout:
            said.append(line)
            if ": resumes " in line:
                break
        attempt = next(r for r in json.loads(cli("runs", "--json").stdout) if r["resumed_from"] == first)
        assert attempt["state"] == "running" and attempt["resume_cause"].startswith("node2 lost during training")
        logs = wait_for(lambda: (out := cli("logs", attempt["run_id"]).stdout) and
                        f"step:{attempt['resume_step'] + 1} " in out and out, 120)
        assert f"Setting global step to {attempt['resume_step']}" in logs

        def saved_on(node):
            listed = sh(fleet[node], f"ls -d {ROOT}/{first}/global_step_*/actor 2>/dev/null || true").stdout.split()
            return sorted(int(path.split("global_step_")[1].split("/")[0]) for path in listed)

        # verl prunes on rank 0's node only, and only its own attempt's saves: watch removes the rest on every node,
        # down to the 2 complete steps kept (and a step being written)
        pruned = wait_for(lambda: all(len(saved_on(n)) <= 3 for n in ("node1", "node2"))
                          and saved_on("node2")[0] > attempt["resume_step"] and saved_on("node2"), 120)
        assert pruned[-1] >= attempt["resume_step"] + 4, pruned
    finally:
        links("up")
        for run in (first, attempt and attempt["run_id"]):
            if run and record_of(run)["state"] == "running":
                cli("stop", run)
        if watcher is not None:
            rest = watcher.communicate(timeout=120)[0]
    # the watch went on watching the resumed attempt, until it was stopped: its one resume is spent
    assert watcher.returncode == 1 and f"run {attempt['run_id']} stopped" in rest, rest
    assert any("node2: removed the shards of step(s) " in line for line in said + rest.splitlines()), said + [rest]
