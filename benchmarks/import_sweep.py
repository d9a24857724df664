"""Benchmark: the import sweep (roles/verify/files/import_sweep.py) on one provisioned node, run as verify and the
audit run it (the CANN environment sourced, the inventory's stand-ins, the manifest's job modules).

Needs a node with the stack installed (e.g. `dapo-sim up --nodes 2 --provisioned` then `ansible-playbook -i
inventory/sim site.yml`, or a real node). Run: .venv/bin/python benchmarks/import_sweep.py [-i INVENTORY] [--node N]
Prints the full sweep's time (goal <= 20 s for the ~200 distributions on 2 cores), the time of a run that reuses
the verdict of an unchanged env, and that run's ratio to `ssh NODE true` (the audit's per-node floor), all measured
in this one run. The verdict file is moved aside for the full sweep and put back afterwards.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time

from dapo_ops.fleet.ssh import run_on
from dapo_ops.inventory import load_inventory
from dapo_ops.layout import node_layout
from dapo_ops.manifest import load_manifest
from dapo_ops.stack.imports import SWEEP_SCRIPT, import_standins, parse_verdict, sweep_arguments


SOURCE_AND_RUN = '. "$1" >/dev/null 2>&1; exec "$2" -c "$3" "${@:4}"'


def timed(host, command: str) -> tuple[float, str]:
    started = time.monotonic()
    result = run_on(host, command, timeout=600)
    seconds = time.monotonic() - started
    if result.failure is not None or result.exit_code != 0:
        sys.exit(f"{host.name}: {result.error or result.stderr.strip()[-500:]}")
    return seconds, result.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-i", "--inventory", default=None)
    parser.add_argument("--node", default=None, help="the node to measure (default: the inventory's first)")
    args = parser.parse_args()
    hosts = load_inventory(args.inventory).hosts
    host = next((h for h in hosts if h.name == args.node), None) if args.node else hosts[0]
    if host is None:
        sys.exit(f"no node {args.node} in the inventory")
    layout = node_layout(host.vars)
    cache = layout["stack_import_sweep_cache"]
    arguments = sweep_arguments(load_manifest(), import_standins(host.vars), layout.src_root, cache)
    run = (f"bash -c {shlex.quote(SOURCE_AND_RUN)} sweep "
           f"{shlex.quote(layout.env_script)} {shlex.quote(layout.python)} {shlex.quote(SWEEP_SCRIPT.read_text())} "
           + " ".join(shlex.quote(a) for a in arguments))
    aside = shlex.quote(cache + ".bench")
    timed(host, "true")                                       # warm the connection path
    floor, _ = timed(host, "true")
    timed(host, f"if [ -e {shlex.quote(cache)} ]; then mv {shlex.quote(cache)} {aside}; fi")
    try:
        full_s, full_out = timed(host, run)
        cached_s, cached_out = timed(host, run)
    finally:
        timed(host, f"if [ -e {aside} ]; then mv {aside} {shlex.quote(cache)}; fi")
    full, cached = parse_verdict(full_out), parse_verdict(cached_out)
    if full.cached or not cached.cached:
        sys.exit("the second run did not reuse the verdict: the env's fingerprint changed between two runs")
    slowest = json.loads(full_out.strip().splitlines()[-1]).get("slowest") or []
    print(f"node {host.name}: {full.distributions} distributions, {full.modules} modules, {full.imported} imported, "
          f"{len(full.skipped)} skipped, {len(full.errors)} failing")
    print(f"full sweep:                 {full_s:6.2f} s over SSH ({full.swept_seconds:.2f} s on the node; "
          f"goal <= 20 s: {'met' if full_s <= 20 else 'MISSED'})")
    print(f"unchanged env (verdict reused): {cached_s:6.2f} s over SSH ({cached.seconds:.2f} s on the node)")
    print(f"ssh {host.name} true:              {floor:6.2f} s")
    print(f"reused / full: {cached_s / full_s:.3f}; reused / ssh true: {cached_s / floor:.2f}")
    print("slowest distributions (s of import): " + ", ".join(f"{name} {s:.2f}" for name, s in slowest))


if __name__ == "__main__":
    main()
