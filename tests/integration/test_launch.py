"""`dapo-ops launch` on a provisioned 2-node simulated fleet with real Ray: launch (with its 32-rank rehearsal),
status, logs, stop; the cluster lock; --rehearse-only; a rehearsal that finds a missing NPU device; a node whose
network is cut during bring-up; a launch asking for more nodes than the inventory has."""

import json
import signal
import subprocess
import sys
import time

import pytest

from dapo_ops.fleet.ssh import run_on
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.sim.fleet import FleetSpec

from .ansible_helpers import playbook
from .helpers import hosts, sh, sigint_as_at_a_terminal

JOB = "jobs/qwen3-30b-a3b-dapo.yaml"


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dapo_ops.cli", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def assert_torn_down(fleet):
    assert all(ray_processes(h) == "" for h in fleet.values())
    starters = "ps -eo args | grep -E '[r]ay-start[.]sh|bin/[r]ay start' || true"
    assert all(sh(h, starters).stdout.strip() == "" for h in fleet.values())
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


def ray_processes(host):
    return sh(host, "ps -eo args | grep -E '[r]aylet|[g]cs_server' || true").stdout.strip()


pytestmark = pytest.mark.usefixtures("runs_dir")  # run records in a temporary directory (conftest)


@pytest.fixture(scope="module")
def fleet(sim):
    sim.down()
    sim.up(FleetSpec(nodes=2))
    rc, output, _ = playbook()
    assert rc == 0, output[-3000:]
    staged = cli("sim", "stage", JOB)
    assert staged.returncode == 0, staged.stderr
    return hosts()


def test_more_nodes_than_the_inventory_is_refused_before_any_change(fleet):
    result = cli("launch", JOB, "--nodes", "3")
    assert result.returncode == 2 and "the job needs 3 node(s) but the inventory has 2" in result.stderr
    assert all(ray_processes(h) == "" for h in fleet.values())
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


def test_launch_status_logs_stop(fleet, runs_dir):
    launched = cli("launch", JOB, "--nodes", "2", "--json")
    assert launched.returncode == 0, launched.stderr
    record = json.loads(launched.stdout)
    run_id = record["run_id"]
    assert record["state"] == "running" and record["stack"]["node1"]["torch_npu"]
    rehearsal = record["rehearsal"]
    assert rehearsal["ok"] and rehearsal["hosts"] == {"node1": 16, "node2": 16}
    assert [r["rank"] for r in rehearsal["per_rank"]] == list(range(32))
    assert {r["host"] for r in rehearsal["per_rank"][:16]} == {"node1"}
    assert rehearsal["per_rank"][21] | {"timings": None} == {"rank": 21, "host": "node2", "device": "/dev/davinci5",
                                                            "pid": rehearsal["per_rank"][21]["pid"], "timings": None}
    assert set(rehearsal["timings"]) == {"check", "all_reduce", "all_to_all"}
    assert all(ray_processes(h) for h in fleet.values())  # a raylet on each node
    second = cli("launch", JOB, "--nodes", "2", "--no-audit")
    assert second.returncode == 1 and f"locked by run {run_id}" in second.stderr
    deadline = time.monotonic() + 120
    while True:
        status = cli("status", run_id, "--json")
        state = json.loads(status.stdout)["ray_job_status"]
        if state in ("SUCCEEDED", "FAILED", "STOPPED") or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert state == "SUCCEEDED", status.stdout + status.stderr
    logs = cli("logs", run_id)
    assert logs.returncode == 0 and "dapo-ops dry mode: DAPO config composed (nnodes=2, n_gpus_per_node=16" in logs.stdout
    stopped = cli("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    assert all(ray_processes(h) == "" for h in fleet.values())
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1
    runs = json.loads(cli("runs", "--json").stdout)
    assert next(r for r in runs if r["run_id"] == run_id)["state"] == "stopped"
    rendered = runs_dir / run_id
    assert (rendered / "job.yaml").exists() and (rendered / "rendered" / "nodes" / "node1" / "submit.sh").exists()


def test_rehearse_only_places_32_ranks_and_leaves_nothing_running(fleet):
    result = cli("launch", JOB, "--nodes", "2", "--rehearse-only", "--no-audit", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["state"] == "rehearsed" and record["submission_id"] is None
    assert record["rehearsal"]["backend"] == "tcp" and len(record["rehearsal"]["per_rank"]) == 32
    assert "32 ranks placed (16 on node1, 16 on node2)" in result.stderr
    assert_torn_down(fleet)


def test_a_rank_without_its_npu_device_fails_the_rehearsal_naming_rank_and_host(fleet):
    sh(fleet["node2"], "mv /dev/davinci5 /dev/.davinci5.hidden")
    try:
        result = cli("launch", JOB, "--nodes", "2", "--no-audit")
    finally:
        sh(fleet["node2"], "mv /dev/.davinci5.hidden /dev/davinci5")
    assert result.returncode == 1
    assert "rehearsal failed: rank 21 on node2: /dev/davinci5 is missing" in result.stderr.splitlines()[-1]
    assert_torn_down(fleet)
    runs = json.loads(cli("runs", "--json").stdout)
    failed = runs[-1]
    assert failed["state"] == "failed" and failed["submission_id"] is None
    assert failed["rehearsal"]["failures"] == [{"phase": "check", "rank": 21, "host": "node2", "waited": False,
                                                "error": "/dev/davinci5 is missing (NPU 5 not visible on this node)"}]


def test_a_node_cut_off_during_bring_up_fails_the_launch_and_tears_down_the_rest(fleet):
    launch = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "launch", JOB, "--nodes", "2", "--no-audit"],
                              cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=sigint_as_at_a_terminal)
    cut = False
    try:
        lines = []
        for line in launch.stdout:
            lines.append(line)
            if "start Ray: the head on node1" in line and not cut:
                for link in ("dapo2n", "data0"):  # the management and the training network
                    subprocess.run(["ip", "netns", "exec", "dapo-node2", "ip", "link", "set", link, "down"], check=True)
                cut = True
        launch.wait(timeout=300)
    finally:
        for link in ("dapo2n", "data0"):
            subprocess.run(["ip", "netns", "exec", "dapo-node2", "ip", "link", "set", link, "up"], check=True)
        if launch.poll() is None:
            launch.kill()
    output = "".join(lines)
    assert cut and launch.returncode == 1, output
    assert lines[-1].startswith("dapo-ops: starting the Ray worker on node2"), output
    deadline = time.monotonic() + 30
    while run_on(fleet["node2"], "true", timeout=10).error and time.monotonic() < deadline:
        time.sleep(1)
    assert_torn_down(fleet)
    failed = json.loads(cli("runs", "--json").stdout)[-1]
    assert failed["state"] == "failed" and "node2" in failed["reason"] and "ray_up" not in failed["timestamps"]


def test_ctrl_c_during_bring_up_tears_down_and_records_the_interruption(fleet):
    launch = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "launch", JOB, "--nodes", "2", "--no-audit"],
                              cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              preexec_fn=sigint_as_at_a_terminal)
    lines = []
    for line in launch.stdout:
        lines.append(line)
        if "start Ray: the head on node1" in line:
            time.sleep(3)  # the head is starting and the worker waits for it
            launch.send_signal(signal.SIGINT)
    launch.wait(timeout=120)
    output = "".join(lines)
    assert launch.returncode == 1 and "launch interrupted; what was started has been torn down" in lines[-1], output
    assert "tear down after the failure" in output
    assert_torn_down(fleet)
    failed = json.loads(cli("runs", "--json").stdout)[-1]
    assert failed["state"] == "failed" and failed["reason"] == "interrupted"
