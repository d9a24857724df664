"""Benchmark: `dapo-sim up --nodes 2` on a warm mirror cache (goal: under 60 s on a 2-core machine).

Run as root: .venv/bin/python benchmarks/sim_up.py [--nodes N]
Prints the measured bring-up and teardown times and the ratio to the goal; leaves a fresh fleet up.
"""

from __future__ import annotations

import argparse
import os
import time

from dapo_sim.fleet import SIM_INVENTORY_DIR, FleetSpec, SimFleet

os.environ["ANSIBLE_INVENTORY"] = str(SIM_INVENTORY_DIR)  # never an operator's own
os.environ.pop("DAPO_OPS_INVENTORY", None)  # dapo-ops without -i: the fleet's

GOAL_SECONDS = 60.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=2)
    args = parser.parse_args()
    fleet = SimFleet()
    fleet.up(FleetSpec(nodes=args.nodes))  # warms the mirror cache (first run downloads wheels)
    started = time.monotonic()
    fleet.down()
    down_seconds = time.monotonic() - started
    started = time.monotonic()
    fleet.up(FleetSpec(nodes=args.nodes))
    up_seconds = time.monotonic() - started
    print(f"sim up --nodes {args.nodes} (warm cache): {up_seconds:.2f} s; sim down: {down_seconds:.2f} s")
    print(f"ratio to the {GOAL_SECONDS:.0f} s goal: {up_seconds / GOAL_SECONDS:.3f} "
          f"({'met' if up_seconds <= GOAL_SECONDS else 'MISSED'})")


if __name__ == "__main__":
    main()
