"""Benchmark: `dapo-ops top`'s refresh on 32 simulated nodes against 32 parallel `ssh NODE true` (the floor; goal:
refresh <= 2x the floor), and what one sample costs on one node.

Run as root: .venv/bin/python benchmarks/top.py [--nodes 32] [--npus-per-node 16] [--samples 10]
A refresh is one `npu-smi info` on every node at once over the connections top keeps open (no handshake), parsed
and judged; the floor opens a connection per node. The first sample, which connects, is timed apart, and so is
the whole `dapo-ops top --once --json` (process start, connections, one sample), without and with the first
sample's frequency read (one `npu-smi info -t common` per NPU). Note: the simulated nodes share this machine's
cores, so every node's emulated npu-smi competes with the others; on a real fleet it runs on each node.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from dapo_ops.inventory import load_inventory
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.telemetry.sampler import Sampler
from dapo_ops.telemetry.series import Window
from dapo_sim.fleet import SIM_INVENTORY_DIR, FleetSpec, SimFleet

sys.path.insert(0, str(PROJECT_ROOT))
from benchmarks.audit import ssh_floor, timed  # noqa: E402

os.environ["ANSIBLE_INVENTORY"] = str(SIM_INVENTORY_DIR)  # never an operator's own
os.environ.pop("DAPO_OPS_INVENTORY", None)
BIN = Path(sys.executable).parent


def refreshes(sampler: Sampler, count: int) -> list[float]:
    window, seconds = Window(), []
    for _ in range(count):
        started = time.monotonic()
        nodes = sampler.sample()
        if not all(n.ok for n in nodes):
            sys.exit(f"a node gave no sample: {[n.error for n in nodes if not n.ok][:3]}")
        window.add(nodes)
        seconds.append(time.monotonic() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--npus-per-node", type=int, default=16)
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    fleet = SimFleet()
    fleet.down()
    print(f"bringing up {args.nodes} provisioned simulated nodes ...", flush=True)
    fleet.up(FleetSpec(nodes=args.nodes, npus_per_node=args.npus_per_node, provisioned=True))
    hosts = list(load_inventory(SIM_INVENTORY_DIR).hosts)
    ssh_floor(hosts)   # warm the nodes' sshd
    floors = [ssh_floor(hosts) for _ in range(3)]
    floor = statistics.median(floors)
    with Sampler(hosts[:1]) as one:
        first_one = refreshes(one, 1)[0]
        per_node = refreshes(one, args.samples)
        on_node = [one.sample()[0].seconds for _ in range(args.samples)]
    with Sampler(hosts) as sampler:
        first = refreshes(sampler, 1)[0]
        refresh = statistics.median(refreshes(sampler, args.samples))
    bare, result = timed([str(BIN / "dapo-ops"), "top", "--once", "--json", "--freq-every", "0"])
    cli, with_freq = timed([str(BIN / "dapo-ops"), "top", "--once", "--json"])
    for done in (result, with_freq):
        if done.returncode != 0:
            sys.exit(f"top failed: {done.stderr[-2000:]}")
    print(f"ssh true, {args.nodes} nodes at once (median of 3):  {floor:6.3f} s (the floor)")
    print(f"top, one node: first sample (connects) {first_one:6.3f} s; then a refresh {statistics.median(per_node):6.3f} s, "
          f"of which npu-smi over the open connection {statistics.median(on_node):6.3f} s")
    print(f"top, {args.nodes} nodes: first sample (connects)  {first:6.3f} s")
    print(f"top, {args.nodes} nodes: refresh (median of {args.samples})   {refresh:6.3f} s")
    print(f"refresh / floor: {refresh / floor:.2f} (goal <= 2: {'met' if refresh / floor <= 2 else 'MISSED'})")
    print(f"`dapo-ops top --once --json --freq-every 0`, {args.nodes} nodes (process, connections, one sample): "
          f"{bare:6.2f} s")
    print(f"`dapo-ops top --once --json`, {args.nodes} nodes (the same and each NPU's frequency, npu-smi info -t common "
          f"once per NPU: {args.nodes * args.npus_per_node} emulated calls on this machine's cores): {cli:6.2f} s")
    fleet.down()


if __name__ == "__main__":
    main()
