"""`dapo-ops launch` on a provisioned 2-node simulated fleet with real Ray: launch, status, logs, stop; the
cluster lock; a launch asking for more nodes than the inventory has."""

import json
import subprocess
import sys

import pytest

from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.sim.fleet import FleetSpec

from .ansible_helpers import playbook
from .helpers import hosts, sh

JOB = "jobs/qwen3-30b-a3b-dapo.yaml"


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "dapo_ops.cli", *args], cwd=PROJECT_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def ray_processes(host):
    return sh(host, "ps -eo args | grep -E '[r]aylet|[g]cs_server' || true").stdout.strip()


@pytest.fixture(scope="module")
def fleet(sim):
    sim.down()
    sim.up(FleetSpec(nodes=2))
    rc, output, _ = playbook()
    assert rc == 0, output[-3000:]
    return hosts()


def test_more_nodes_than_the_inventory_is_refused_before_any_change(fleet):
    result = cli("launch", JOB, "--nodes", "3")
    assert result.returncode == 2 and "the inventory has 2 node(s)" in result.stderr
    assert all(ray_processes(h) == "" for h in fleet.values())
    assert sh(fleet["node1"], "test -e /var/lib/dapo-ops/cluster.lock", ok=False).exit_code == 1


def test_launch_status_logs_stop(fleet):
    launched = cli("launch", JOB, "--nodes", "2", "--json")
    assert launched.returncode == 0, launched.stderr
    record = json.loads(launched.stdout)
    run_id = record["run_id"]
    assert record["state"] == "running" and record["stack"]["node1"]["torch_npu"]
    assert all(ray_processes(h) for h in fleet.values())  # a raylet on each node
    second = cli("launch", JOB, "--nodes", "2", "--no-audit")
    assert second.returncode == 1 and f"locked by run {run_id}" in second.stderr
    import time

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
    rendered = PROJECT_ROOT / "runs" / "launch" / run_id
    assert (rendered / "job.yaml").exists() and (rendered / "rendered" / "nodes" / "node1" / "submit.sh").exists()
