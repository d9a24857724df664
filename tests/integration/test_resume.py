"""Issue 29 on the simulated fleet: a run that checkpoints, loses a node, and goes on with `launch --resume` from its
last step complete on every node, on the same nodes; a step written on one node only is not used. The sim's verl
saves and resumes as verl does on disk (dapo_sim/assets/verl_checkpoints.py)."""

import json
import subprocess
import sys
import time

import pytest

from dapo_ops.fleet.ssh import run_on
from dapo_ops.paths import PROJECT_ROOT

from .helpers import hosts, launch_training, sh

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


def last_complete(run_id: str) -> int:
    """The last complete step `status` reads on the nodes now (-1: none). `status` of a failed run exits 1, after
    its JSON."""
    checked = cli("status", run_id, "--json")
    try:
        step = json.loads(checked.stdout)["saved"].get("last_complete")
    except ValueError:
        return -1
    return -1 if step is None else step


def saved_on(fleet, node: str, chain: str) -> list[int]:
    listed = sh(fleet[node], f"ls -d {ROOT}/{chain}/global_step_*/actor 2>/dev/null || true").stdout.split()
    return sorted(int(path.split("global_step_")[1].split("/")[0]) for path in listed)


def test_a_run_that_loses_a_node_goes_on_from_its_last_complete_step_by_watch_and_by_launch_resume(
        fleet, tmp_path, runs_dir):
    """Done when of issue 29, in one chain of three attempts on the same 2 nodes (node-local checkpoints):
    `watch --resume-on-failure 1` resumes the first attempt by itself once node2 is back, not from a step written
    on node1 only; the second attempt loses node2 too, and `launch --resume` continues it; the report of the third
    is one step sequence from step 1."""
    first = launch_training(tmp_path, save_freq=2)
    watcher, second, third = None, None, None
    try:
        wait_for(lambda: last_complete(first) >= 2, 120)
        assert "(ranks 0-15 on node1, ranks 16-31 on node2)" in cli("status", first).stdout
        watcher = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "watch", first, "--interval", "2",
                                    "--resume-on-failure", "1", "--wait-for-nodes", "300"], cwd=PROJECT_ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        said = []
        links("down")
        try:
            for line in watcher.stdout:
                said.append(line)
                if "waiting for node2 to answer again" in line:
                    break
            assert any(f"{first} failed (node2 lost during training" in line for line in said), said
            # the job's console, kept before Ray was stopped on node1: the report of the chain reads its steps
            assert "step:2 - training/global_step:2" in (runs_dir / first / "console.log").read_text()
            # node2 is gone: its ranks' shards cannot be counted, so no step is known complete
            assert "checkpoints: not known while node2 cannot be read" in cli("status", first).stdout
            # the step after the last one saved, written on node1 only (node2 was cut off while saving it)
            half = saved_on(fleet, "node1", first)[-1] + 2
            sh(fleet["node1"], f"cp -r {ROOT}/{first}/global_step_{half - 2} {ROOT}/{first}/global_step_{half}")
        finally:
            links("up")
        for line in watcher.stdout:
            said.append(line)
            if ": resumes " in line:
                break
        second = next(r for r in json.loads(cli("runs", "--json").stdout) if r["resumed_from"] == first)
        resumed_at = second["resume_step"]
        assert second["state"] == "running" and second["resume_cause"].startswith("node2 lost during training")
        assert resumed_at == half - 2 and second["chain"] == first and second["checkpoint_root"] == f"{ROOT}/{first}"
        overrides = (runs_dir / second["run_id"] / "rendered" / "overrides.txt").read_text().splitlines()
        assert "trainer.resume_mode=resume_path" in overrides
        assert f"trainer.resume_from_path={ROOT}/{first}/global_step_{resumed_at}" in overrides
        logs = wait_for(lambda: (out := cli("logs", second["run_id"]).stdout) and
                        f"step:{resumed_at + 1} " in out and out, 120)
        assert f"Setting global step to {resumed_at}" in logs
        assert f"Resuming from {ROOT}/{first}/global_step_{resumed_at}" in logs
        # verl prunes on rank 0's node only, and only its own attempt's saves: watch removes the rest on every
        # node, down to the 2 complete steps kept (and a step being written)
        pruned = wait_for(lambda: all(len(saved_on(fleet, n, first)) <= 3 for n in ("node1", "node2"))
                          and saved_on(fleet, "node2", first)[0] > resumed_at and saved_on(fleet, "node2", first),
                          120)
        assert pruned[-1] >= resumed_at + 4, pruned

        # the second attempt loses node2 too; the watch's one resume is spent: it ends, and the run is resumed by hand
        links("down")
        try:
            rest = watcher.communicate(timeout=240)[0]
        finally:
            links("up")
        assert watcher.returncode == 1 and f"run {second['run_id']} failed: node2 lost" in rest, rest
        assert "node2: removed the shards of step(s) " in "".join(said) + rest
        wait_for(lambda: not run_on(fleet["node2"], "true", timeout=10).error, 60, every=1)
        complete = last_complete(second["run_id"])
        assert complete > resumed_at
        again = cli("launch", "--resume", second["run_id"], "--no-audit", "--json")
        assert again.returncode == 0, again.stderr
        third = json.loads(again.stdout)
        assert (third["resumed_from"], third["resume_step"], third["chain"]) == (second["run_id"], complete, first)
        logs = wait_for(lambda: (out := cli("logs", third["run_id"]).stdout) and f"step:{complete + 2} " in out
                        and out, 120)
        assert f"Setting global step to {complete}" in logs
        assert f"step:{complete + 1} - training/global_step:{complete + 1}" in logs
        stopped = cli("stop", third["run_id"])
        assert stopped.returncode == 0, stopped.stderr
        report = cli("report", third["run_id"], "--json", "--out", str(tmp_path / "report"))
        assert report.returncode == 0, report.stderr
        steps = json.loads(report.stdout)["summary"]["steps"]
        # one sequence over the three attempts: every step once, from 1; only the work lost after a resumed step
        # was done again
        assert steps["first"] == 1 and steps["trained"] == steps["last"] >= complete + 2, steps
        assert all(step > resumed_at for step in steps["replayed"]), steps
    finally:
        links("up")
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
        for run in (first, second and second["run_id"], third and third["run_id"]):
            if run and record_of(run)["state"] == "running":
                cli("stop", run)
