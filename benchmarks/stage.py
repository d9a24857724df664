"""Benchmark: `dapo-ops stage` of a generated model (about 400 MiB of shards) and data to 4 simulated nodes whose
links are limited to 200 Mbit/s (`dapo-sim up --link-mbit 200`), against plain scp of the same files.

Goals (issue 30): the first stage takes at most 1.5x one scp to one node; a rerun at most 0.5x the first and sends
nothing; a shard changed on one node with its size and mtime kept is sent again. Also printed: the ratio to N
sequential scps (what copying by hand costs).

Run as root: .venv/bin/python benchmarks/stage.py [--nodes 4] [--mbit 200] [--weights-mib 400]
Leaves the fleet up, with the files staged.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from dapo_ops.fleet.ssh import HostSpec, run_on
from dapo_ops.inventory import load_inventory
from dapo_ops.job.spec import load_spec
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.stage.run import stage
from dapo_ops.stage.source import Source
from dapo_sim.fleet import FleetSpec, SimFleet
from dapo_sim.stage import job_files
from dapo_sim.staging import write_source

JOB = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"
SCP_DIR = "/tmp/dapo-bench-scp"


def scp(host: HostSpec, sources: list[Path]) -> float:
    """One plain scp of the files to the host (OpenSSH's client, the fleet's key and known_hosts); seconds."""
    run_on(host, f"rm -rf {SCP_DIR} && mkdir -p {SCP_DIR}").raise_for("clear the scp directory")
    started = time.monotonic()
    subprocess.run(["scp", "-q", "-i", str(host.key_file), "-o", f"UserKnownHostsFile={host.known_hosts}",
                    "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-P", str(host.port),
                    *map(str, sources), f"{host.user}@{host.address}:{SCP_DIR}/"], check=True)
    seconds = time.monotonic() - started
    run_on(host, f"rm -rf {SCP_DIR}")
    return seconds


def node_hashes(host: HostSpec, paths: list[str]) -> dict[str, str]:
    out = run_on(host, "sha256sum -- " + " ".join(map(shlex.quote, paths)), timeout=300).raise_for("sha256sum")
    return {line.split(None, 1)[1].strip(): line.split()[0] for line in out.splitlines()}


def tamper(host: HostSpec, path: str) -> None:
    """Flip the last byte of the node's copy, keeping its size and mtime."""
    script = ("import os,sys; p=sys.argv[1]; s=os.stat(p); f=open(p,'r+b'); f.seek(-1,2); b=f.read(1); f.seek(-1,2); "
              "f.write(bytes([b[0]^1])); f.close(); os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns))")
    run_on(host, f"python3 -c {shlex.quote(script)} {shlex.quote(path)}").raise_for("change a shard")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--mbit", type=int, default=200)
    parser.add_argument("--weights-mib", type=int, default=400)
    args = parser.parse_args()
    fleet = SimFleet()
    fleet.up(FleetSpec(nodes=args.nodes, link_mbit=args.mbit))
    spec = load_spec(JOB)
    hosts = list(load_inventory(fleet.inventory_file).hosts)
    files = job_files(spec, args.weights_mib << 20)
    model_dir, data_dir = write_source(spec, files, fleet.state_dir / "bench-stage")
    sources = sorted(model_dir.iterdir()) + sorted(data_dir.iterdir())
    total = sum(p.stat().st_size for p in sources)
    targets = sorted(files)
    for host in hosts:   # a clean start: none of the job's files on any node
        run_on(host, "rm -f -- " + " ".join(map(shlex.quote, targets))).raise_for("clear the job's files")
    print(f"{len(sources)} files, {total / 2**20:.0f} MiB; {args.nodes} nodes, links {args.mbit} Mbit/s", flush=True)

    one = scp(hosts[0], sources)
    print(f"one scp to one node: {one:.1f} s", flush=True)
    sequential = sum(scp(host, sources) for host in hosts)
    print(f"{args.nodes} sequential scps: {sequential:.1f} s", flush=True)

    def staged():
        return stage(spec, hosts, hosts, Source(None, str(model_dir)), Source(None, str(data_dir)))

    first = staged()
    print(f"stage, first: {first.seconds:.1f} s ({first.mode}, {first.sent_bytes / 2**20:.0f} MiB from the "
          "controller)", flush=True)
    want = {t: hashlib.sha256(files[t]).hexdigest() for t in targets}
    wrong = [f"{h.name}:{t}" for h in hosts for t, sha in node_hashes(h, targets).items() if want[t] != sha]
    rerun = staged()
    print(f"stage, rerun: {rerun.seconds:.1f} s, {rerun.sent_bytes} bytes sent", flush=True)
    shard = next(t for t in targets if t.endswith(".safetensors"))
    tamper(hosts[-1], shard)
    fixed = staged()
    resent = {name: node["sent_files"] for name, node in fixed.nodes.items() if node["sent_files"]}
    print(f"after changing {shard} on {hosts[-1].name} (size and mtime kept): sent {resent}", flush=True)

    ratio_one, ratio_rerun = first.seconds / one, rerun.seconds / first.seconds
    print(f"ratio to one scp to one node: {ratio_one:.2f} (goal <= 1.5: {'met' if ratio_one <= 1.5 else 'MISSED'})")
    print(f"ratio to {args.nodes} sequential scps: {first.seconds / sequential:.2f}")
    print(f"rerun / first: {ratio_rerun:.2f} (goal <= 0.5: {'met' if ratio_rerun <= 0.5 else 'MISSED'}); "
          f"sent nothing: {rerun.sent_bytes == 0 and rerun.mode == 'nothing to send'}")
    print(f"every node's files hash to the source's: {not wrong}" + (f" (wrong: {wrong})" if wrong else ""))
    print(f"the changed shard found by its hash and sent again: {resent == {hosts[-1].name: 1}}")
    ok = ratio_one <= 1.5 and ratio_rerun <= 0.5 and rerun.sent_bytes == 0 and not wrong and \
        resent == {hosts[-1].name: 1}
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    os.environ.pop("DAPO_OPS_INVENTORY", None)
    main()
