"""Benchmark: `dapo-ops launch --rehearse-only` until its 32 ranks are placed, against the bare sequence an engineer
would type (ray start on the head, ray start on the worker, poll until Ray shows 32 NPU), on 2 simulated nodes.

Run as root: .venv/bin/python benchmarks/launch.py [--rounds 3]
It brings up 2 simulated nodes and provisions them with site.yml (idempotent: quick when already done), then
alternates the two sequences and prints their medians and ratios (goal: launch <= 1.3x the bare sequence).

"32 ranks placed" is read from launch's own progress lines: the rehearsal's placement groups ready (32 one-NPU
bundles reserved on their nodes) and, later, the 32 rank actors running. The bare sequence starts no per-rank
process, so the goal is judged on the first; the second shows what starting 32 Python processes costs on top.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from dapo_ops.fleet.ssh import run_on
from dapo_ops.inventory import load_inventory
from dapo_ops.job.spec import load_spec
from dapo_ops.layout import node_layout
from dapo_ops.paths import PROJECT_ROOT
from dapo_sim.fleet import SIM_INVENTORY_DIR, FleetSpec, SimFleet
from dapo_sim.staging import stage_job

os.environ["ANSIBLE_INVENTORY"] = str(SIM_INVENTORY_DIR)  # never an operator's own
os.environ.pop("DAPO_OPS_INVENTORY", None)  # dapo-ops without -i: the fleet's

BIN = Path(sys.executable).parent
JOB = "jobs/qwen3-30b-a3b-dapo.yaml"
NPUS = 16
PROBE = ("import ray; ray.init(address='auto', logging_level='ERROR'); "
         "print('NPU', int(ray.cluster_resources().get('NPU', 0)), len([n for n in ray.nodes() if n['Alive']]))")


def remote(host, env_script: str, command: str, timeout: float = 120):
    result = run_on(host, f"bash -c {shlex.quote(f'source {env_script} >/dev/null && {command}')}", timeout=timeout)
    if result.error or result.exit_code != 0:
        sys.exit(f"{command!r} on {host.name} failed: {result.error or result.stderr[-1000:]}")
    return result.stdout


def bare_sequence(head, worker) -> float:
    layout = node_layout(head.vars)
    env, ray, python = layout.env_script, layout.ray, layout.python
    resources = shlex.quote('{"NPU": %d}' % NPUS)
    started = time.monotonic()
    remote(head, env, f"{ray} start --head --node-ip-address={head.address} --port=6379 "
                      f"--dashboard-host={head.address} --resources={resources} --disable-usage-stats")
    remote(worker, env, f"timeout 120 {ray} start --address={head.address}:6379 --node-ip-address={worker.address} "
                        f"--resources={resources} --disable-usage-stats")
    while True:
        if f"NPU {2 * NPUS} 2" in remote(head, env, f"{python} -c {shlex.quote(PROBE)}"):
            break
        time.sleep(1)
    seconds = time.monotonic() - started
    for host in (head, worker):
        remote(host, env, f"{ray} stop --force >/dev/null 2>&1; true")
    return seconds


def launch_rehearse_only(extra: list[str]) -> tuple[float, float, float]:
    """Seconds until the bundles were reserved, until the rank actors ran, until launch returned."""
    started = time.monotonic()
    process = subprocess.Popen([str(BIN / "dapo-ops"), "launch", JOB, "--nodes", "2", "--rehearse-only", *extra],
                               cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reserved = placed = None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if reserved is None and f"{2 * NPUS} one-NPU bundles reserved" in line:
            reserved = time.monotonic() - started
        if placed is None and f"{2 * NPUS} ranks placed" in line:
            placed = time.monotonic() - started
    if process.wait() != 0 or reserved is None or placed is None:
        sys.exit("launch --rehearse-only failed:\n" + "".join(lines[-20:]))
    return reserved, placed, time.monotonic() - started


def provisioned_fleet() -> None:
    """2 simulated nodes, provisioned with site.yml (quick when already done), the job's files staged."""
    fleet = SimFleet()
    fleet.up(FleetSpec(nodes=2, npus_per_node=NPUS))
    print("provisioning the 2 nodes (site.yml) ...", flush=True)
    provision = subprocess.run([str(BIN / "ansible-playbook"), "site.yml"], cwd=PROJECT_ROOT, capture_output=True,
                               text=True)
    if provision.returncode != 0:
        sys.exit("site.yml failed:\n" + provision.stdout[-3000:])
    stage_job(load_spec(PROJECT_ROOT / JOB), fleet.inventory_file, fleet.state_dir / "staged")  # the files the rehearsal checks for


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    provisioned_fleet()
    head, worker = load_inventory(SIM_INVENTORY_DIR).hosts[:2]
    bare, audited, unaudited = [], [], []
    for round_ in range(args.rounds):
        bare.append(bare_sequence(head, worker))
        audited.append(launch_rehearse_only([]))
        unaudited.append(launch_rehearse_only(["--no-audit"]))
        print(f"round {round_ + 1}: bare {bare[-1]:.1f} s; launch to bundles reserved {audited[-1][0]:.1f} s, "
              f"to ranks running {audited[-1][1]:.1f} s; --no-audit {unaudited[-1][0]:.1f} s", flush=True)
    base = statistics.median(bare)
    median = {name: [statistics.median(r[i] for r in runs) for i in range(3)]
              for name, runs in (("launch", audited), ("launch --no-audit", unaudited))}
    print(f"bare sequence (ray start head, ray start worker, poll for {2 * NPUS} NPU): {base:6.1f} s")
    for name, (reserved, placed, total) in median.items():
        print(f"{name:18}: {2 * NPUS} bundles reserved {reserved:6.1f} s (ratio {reserved / base:.2f}), "
              f"{2 * NPUS} rank actors running {placed:6.1f} s (ratio {placed / base:.2f}), "
              f"whole rehearse-only run {total:6.1f} s")
    ratio = median["launch"][0] / base
    print(f"launch to {2 * NPUS} ranks placed / bare sequence: {ratio:.2f} "
          f"(goal <= 1.3: {'met' if ratio <= 1.3 else 'MISSED'})")


if __name__ == "__main__":
    main()
