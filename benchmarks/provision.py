"""Benchmark: `ansible-playbook site.yml` on a fresh 2-node simulated fleet, then again.

Run as root: .venv/bin/python benchmarks/provision.py
Prints both run times, the changed counts and the ratio (goals: second run changed=0 and <= 0.3x the first).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.recap import parse_recap
from dapo_sim.fleet import SIM_INVENTORY_DIR, FleetSpec, SimFleet

os.environ["ANSIBLE_INVENTORY"] = str(SIM_INVENTORY_DIR)  # never an operator's own
os.environ.pop("DAPO_OPS_INVENTORY", None)  # dapo-ops without -i: the fleet's

PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))


def run() -> tuple[float, dict]:
    started = time.monotonic()
    result = subprocess.run([PLAYBOOK, "-i", str(SIM_INVENTORY_DIR), "site.yml"], cwd=PROJECT_ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if result.returncode != 0:
        sys.exit(f"site.yml failed:\n{result.stdout[-3000:]}")
    return seconds, {h: r["changed"] for h, r in parse_recap(result.stdout).items() if h != "localhost"}


def main() -> None:
    fleet = SimFleet()
    fleet.down()
    fleet.up(FleetSpec(nodes=2))
    first, first_changed = run()
    second, second_changed = run()
    ratio = second / first
    print(f"first run:  {first:6.1f} s  changed {first_changed}")
    print(f"second run: {second:6.1f} s  changed {second_changed}")
    met = all(v == 0 for v in second_changed.values()) and ratio <= 0.3
    print(f"ratio second/first: {ratio:.2f} (goal: changed=0 and <= 0.30: {'met' if met else 'MISSED'})")


if __name__ == "__main__":
    main()
