"""Benchmark: `dapo-ops audit` of 1 and of 32 simulated nodes, and the same collection with Ansible ad-hoc.

Run as root: .venv/bin/python benchmarks/audit.py [--nodes 32] [--npus-per-node 16]
Prints the three times and the ratios (goals: 32 nodes <= 2x one node; dapo-ops >= 3x faster than
`ansible all -m shell` with forks 50). Note: the simulated nodes share this machine's cores, so every node's
emulated npu-smi/hccn_tool work competes with the others; on a real fleet that work runs on each node.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from dapo_ops.audit.collect import collection_script, node_context
from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.sim.fleet import FleetSpec, SimFleet
from dapo_ops.stackcheck import pinned_python_packages

BIN = Path(sys.executable).parent


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    result = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True)
    return time.monotonic() - started, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--npus-per-node", type=int, default=16)
    args = parser.parse_args()
    manifest = load_manifest()
    fleet = SimFleet()
    fleet.down()
    print(f"bringing up {args.nodes} provisioned simulated nodes ...", flush=True)
    state = fleet.up(FleetSpec(nodes=args.nodes, npus_per_node=args.npus_per_node, provisioned=True))
    fact = json.dumps({"python": f"{manifest.python_version}.2", "import_errors": {}, "torch_cxx11_abi": True,
                       "atb_cxx_abi": "1", "packages": dict(pinned_python_packages(manifest), numpy="1.26.4")})
    for node in state.nodes:
        fleet.exec_in_node(node, ["sh", "-c", f"mkdir -p /etc/ansible/facts.d && echo '{fact}' > "
                                              "/etc/ansible/facts.d/dapo_ops.fact"])
    audit = [str(BIN / "dapo-ops"), "audit", "--json", "--max-parallel", "32"]
    timed(audit)  # warm every node's emulated-tool cache, as any later audit finds it
    one, r1 = timed(audit + ["--limit", "node1"])
    many, rn = timed(audit)
    for result in (r1, rn):
        if result.returncode != 0:
            sys.exit(f"audit failed: {result.stderr[-2000:]}")
    script = collection_script(node_context({}, manifest.platform["install_path"]), args.npus_per_node)
    adhoc, ra = timed([str(BIN / "ansible"), "npu_nodes", "-f", "50", "-m", "ansible.builtin.shell", "-a", script])
    if ra.returncode != 0:
        sys.exit(f"ansible ad-hoc collection failed: {ra.stdout[-2000:]}")
    print(f"dapo-ops audit, 1 node:            {one:6.2f} s")
    print(f"dapo-ops audit, {args.nodes} nodes:          {many:6.2f} s")
    print(f"ansible -m shell (forks 50), {args.nodes}:   {adhoc:6.2f} s (collection only, no analysis)")
    print(f"ratio {args.nodes} nodes / 1 node: {many / one:.2f} (goal <= 2: {'met' if many / one <= 2 else 'MISSED'})")
    print(f"speed-up over ansible ad-hoc: {adhoc / many:.2f}x (goal >= 3: {'met' if adhoc / many >= 3 else 'MISSED'})")
    fleet.down()


if __name__ == "__main__":
    main()
