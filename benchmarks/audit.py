"""Benchmark: `dapo-ops audit` of 1 and of 32 simulated nodes, against the floor (`ssh NODE true` to the same
nodes at once, OpenSSH, same run) and against the same collection with Ansible ad-hoc.

Run as root: .venv/bin/python benchmarks/audit.py [--nodes 32] [--npus-per-node 16]
Prints the times and the ratios (goals: one node <= 0.8 s; 32 nodes <= 1.5x the floor), and the speed-up over
`ansible all -m shell` with forks 50. It also times the collection script itself through OpenSSH, 1 node and all
at once: the nodes' own work, which the audit cannot go below. Note: the simulated nodes share this machine's cores, so every node's
emulated npu-smi/hccn_tool work competes with the others; on a real fleet that work runs on each node.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from dapo_ops.audit.collect import collection_script, node_context
from dapo_ops.inventory import load_inventory
from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT
from dapo_sim.fleet import SIM_INVENTORY_DIR, FleetSpec, SimFleet

sys.path.insert(0, str(PROJECT_ROOT))  # the tests' stand-in Python stack
from tests.integration.helpers import standin_stack_env  # noqa: E402

os.environ["ANSIBLE_INVENTORY"] = str(SIM_INVENTORY_DIR)  # never an operator's own
os.environ.pop("DAPO_OPS_INVENTORY", None)  # dapo-ops without -i: the fleet's

BIN = Path(sys.executable).parent


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    result = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True)
    return time.monotonic() - started, result


def ssh_floor(hosts, command: str = "true") -> float:
    """Seconds for `ssh HOST COMMAND` to every host at once (host keys checked, as dapo-ops does)."""
    started = time.monotonic()
    processes = [subprocess.Popen(["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                                   "-o", f"UserKnownHostsFile={h.known_hosts}", "-i", str(h.key_file), "-p", str(h.port),
                                   f"{h.user}@{h.address}", command], stdout=subprocess.DEVNULL) for h in hosts]
    if any(p.wait() != 0 for p in processes):
        sys.exit(f"ssh {command[:40]!r} failed on a node")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--npus-per-node", type=int, default=16)
    args = parser.parse_args()
    manifest = load_manifest()
    fleet = SimFleet()
    fleet.down()
    print(f"bringing up {args.nodes} provisioned simulated nodes ...", flush=True)
    fleet.up(FleetSpec(nodes=args.nodes, npus_per_node=args.npus_per_node, provisioned=True))
    # the Python stack the live probe imports (stand-in wheels and the lock's metadata, as the audit's tests use)
    standin_stack_env({h.name: h for h in load_inventory(SIM_INVENTORY_DIR).hosts})
    audit = [str(BIN / "dapo-ops"), "audit", "--json", "--max-parallel", "32"]
    timed(audit)  # warm every node's emulated-tool cache, as any later audit finds it
    one, r1 = timed(audit + ["--limit", "node1"])
    many, rn = timed(audit)
    for result in (r1, rn):
        if result.returncode != 0:
            sys.exit(f"audit failed: {result.stderr[-2000:]}")
    hosts = load_inventory(SIM_INVENTORY_DIR).hosts
    ssh_floor(hosts)  # warm the nodes' sshd, as the warm-up audit did
    floor_one, floor = ssh_floor(hosts[:1]), ssh_floor(hosts)
    script = collection_script(node_context({}, manifest.platform["install_path"]), args.npus_per_node)
    # the nodes' own share: the same collection script through OpenSSH, no dapo-ops around it
    script_one, script_all = ssh_floor(hosts[:1], script), ssh_floor(hosts, script)
    adhoc, ra = timed([str(BIN / "ansible"), "npu_nodes", "-f", "50", "-m", "ansible.builtin.shell", "-a", script])
    if ra.returncode != 0:
        sys.exit(f"ansible ad-hoc collection failed: {ra.stdout[-2000:]}")
    print(f"ssh true, 1 node:                  {floor_one:6.2f} s")
    print(f"ssh true, {args.nodes} nodes at once:       {floor:6.2f} s (the floor)")
    print(f"dapo-ops audit, 1 node:            {one:6.2f} s (goal <= 0.8 s: {'met' if one <= 0.8 else 'MISSED'})")
    print(f"dapo-ops audit, {args.nodes} nodes:          {many:6.2f} s")
    print(f"audit / floor, {args.nodes} nodes: {many / floor:.2f} (goal <= 1.5: {'met' if many / floor <= 1.5 else 'MISSED'})")
    print(f"the collection script over ssh, 1 node:      {script_one:6.2f} s")
    print(f"the collection script over ssh, {args.nodes} at once:  {script_all:6.2f} s "
          f"(audit / this: {many / script_all:.2f}; what dapo-ops adds to the nodes' own work)")
    print(f"ansible -m shell (forks 50), {args.nodes}:   {adhoc:6.2f} s (collection only, no analysis)")
    # The floor itself grows with the node count here (32 SSH handshakes share 2 cores): 32 nodes against one is
    # bounded by floor/floor_one, not by anything dapo-ops does, so the goal is set against the floor.
    print(f"ratio {args.nodes} nodes / 1 node: {many / one:.2f} (the floor's own ratio: {floor / floor_one:.2f})")
    print(f"speed-up over ansible ad-hoc: {adhoc / many:.2f}x")
    fleet.down()


if __name__ == "__main__":
    main()
