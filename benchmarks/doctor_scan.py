"""Benchmark: `dapo-ops doctor` reading a large console log, against `grep -F -c -f` with the signatures' literals
(GNU grep's multi-string search over the same file; both read it from the page cache: each is run once to warm it,
then timed, best of --repeat).

The log is the report benchmark's DAPO console noise (vLLM engine stats, tqdm redraws, Ray prefixes in ANSI colour,
warnings) with, near its end, a rank's failure as torch_npu prints it (the CANN error, then its own line with PID,
Device and RankID) and other ranks' HCCL socket timeouts after it. The diagnosis must name that rank.

Run: .venv/bin/python benchmarks/doctor_scan.py [--size-mb 1024] [--keep DIR]
Prints MB/s and the ratio to grep's time (goal: >= 20 MB/s, a 1 GB console in under a minute).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dapo_ops.doctor.diagnose import diagnose_paths
from dapo_ops.doctor.signatures import default_catalog

sys.path.insert(0, str(Path(__file__).parent))
from report_parse import best_of, noise_block  # noqa: E402  (a sibling script, not a package)

FAILURE = (
    "\x1b[36m(WorkerDict pid=5121, ip=10.0.0.3)\x1b[0m RuntimeError: NPU function error: "
    "c10_npu::SetDevice(device_id), error code is 507033\n"
    "\x1b[36m(WorkerDict pid=5121, ip=10.0.0.3)\x1b[0m [ERROR] 2026-12-01-10:14:03 (PID:5121, Device:5, RankID:21) "
    "ERR00100 PTA call acl api failed\n")
FALLOUT = ("\x1b[36m(WorkerDict pid={pid}, ip=10.0.0.2)\x1b[0m [ERROR] 2026-12-01-10:44:{s:02d} (PID:{pid}, "
           "Device:{npu}, RankID:{rank}) ERR02200 DIST call hccl api failed.\n"
           "\x1b[36m(WorkerDict pid={pid}, ip=10.0.0.2)\x1b[0m EI0006: [PID: {pid}] 2026-12-01-10:44:{s:02d}.000.000 "
           "Getting socket times out. Reason: Remote Rank did not send the data in time.\n")


def generate(directory: Path, size: int) -> Path:
    node = directory / "node1"
    node.mkdir(parents=True)
    path = node / "console.log"
    rng = random.Random(21)
    blocks = [noise_block(rng, 2_000_000) for _ in range(4)]
    written = 0
    with open(path, "wb") as out:
        while written < size:
            block = blocks[written // 2_000_000 % len(blocks)]
            out.write(block)
            written += len(block)
        out.write(FAILURE.encode())
        for rank in range(8):
            out.write(FALLOUT.format(pid=6000 + rank, npu=rank, rank=rank, s=rank).encode())
        out.write(blocks[0])
    return path


def grep(path: Path, literals: Path) -> int:
    found = subprocess.run(["grep", "-F", "-c", "-f", str(literals), str(path)], capture_output=True, text=True)
    return int(found.stdout or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="write the logs under this directory and keep them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.keep or Path(tmp)
        path = generate(directory / "bundle", int(args.size_mb * 1e6))
        literals = directory / "literals.txt"
        literals.write_bytes(b"\n".join(default_catalog().finder.literals) + b"\n")
        size_mb = path.stat().st_size / 1e6
        grep(path, literals), diagnose_paths([path.parent.parent])        # the page cache, warm for both
        grep_s, lines = best_of(args.repeat, lambda: grep(path, literals))
        doctor_s, diagnosis = best_of(args.repeat, lambda: diagnose_paths([path.parent.parent]))
    root = diagnosis.root
    if root is None or (root.signature, root.node, root.rank, root.npu) != ("acl-device-setup", "10.0.0.3", 21, 5):
        raise SystemExit(f"wrong diagnosis: {root}")
    rate, ratio = size_mb / doctor_s, doctor_s / grep_s
    print(f"{size_mb:.0f} MB, {diagnosis.events} events, root cause {root.signature} at {root.where}; "
          f"grep -F found {lines} lines with a literal")
    print(f"doctor: {doctor_s:.2f} s, {rate:.0f} MB/s; grep -F -c -f: {grep_s:.2f} s; doctor / grep = {ratio:.2f}x")
    print(f"goal: >= 20 MB/s {'met' if rate >= 20 else 'MISSED'}")


if __name__ == "__main__":
    main()
