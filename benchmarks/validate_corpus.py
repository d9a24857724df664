"""Benchmark: `dapo-ops validate` on every spec of the job corpus (tests/data/jobs), each as its own process, as a
user runs it. Prints the slowest refusal and the slowest acceptance (goal: every bad input refused in under 2 s,
the YAML bomb included).

Run: .venv/bin/python benchmarks/validate_corpus.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "tests" / "data" / "jobs"
INVENTORY = ROOT / "tests" / "data" / "inventory" / "two-nodes"


def main() -> None:
    cases = yaml.safe_load((JOBS / "cases.yml").read_text())
    times: list[tuple[float, str, int]] = []
    for case in cases:
        started = time.monotonic()
        result = subprocess.run([str(Path(sys.executable).with_name("dapo-ops")), "validate", str(JOBS / case["file"]),
                                 "-i", str(INVENTORY)], capture_output=True, text=True, cwd=ROOT)
        times.append((time.monotonic() - started, case["file"], result.returncode))
        if result.returncode != case["exit"]:
            sys.exit(f"{case['file']}: exit {result.returncode}, expected {case['exit']}: {result.stderr.strip()}")
    refused = max(t for t in times if t[2] != 0)
    accepted = max(t for t in times if t[2] == 0)
    print(f"{len(times)} specs; slowest refusal {refused[0]:.2f} s ({refused[1]}), slowest acceptance "
          f"{accepted[0]:.2f} s ({accepted[1]})")
    print(f"goal: every refusal under 2 s: {'met' if refused[0] < 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
