"""Benchmark: what Ray's gRPC over mutual TLS (`dapo_ray_tls: true`, dapo_ops/job/ray_tls.py) costs a launch, on 2
simulated nodes: `dapo-ops launch --rehearse-only --no-audit` with and without it, alternated.

Run as root: .venv/bin/python benchmarks/ray_tls.py [--rounds 3]
It brings up 2 simulated nodes and provisions them with site.yml (idempotent: quick when already done), then prints
the medians of each (until the rehearsal's 32 one-NPU bundles are reserved in Ray, until its 32 rank actors run,
until launch returns) and the ratio TLS / plain of each. The certificates are made on the controller in the
"render and push" step; every Ray connection after it (the worker's raylet joining the GCS, the rehearsal's driver
and its 32 actors) does a TLS handshake.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from dapo_ops.paths import PROJECT_ROOT

sys.path.insert(0, str(Path(__file__).parent))
from launch import NPUS, launch_rehearse_only, provisioned_fleet  # noqa: E402


def tls_inventory(into: Path) -> Path:
    """The simulated fleet's inventory with dapo_ray_tls: true on both nodes."""
    copy = into / "inventory"
    shutil.copytree(PROJECT_ROOT / "inventory" / "sim", copy)
    data = yaml.safe_load((copy / "hosts.yml").read_text())
    for values in data["all"]["children"]["npu_nodes"]["hosts"].values():
        values["dapo_ray_tls"] = True
    (copy / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    return copy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    provisioned_fleet()
    with tempfile.TemporaryDirectory() as scratch:
        with_tls = ["--no-audit", "-i", str(tls_inventory(Path(scratch)))]
        plain, tls = [], []
        for round_ in range(args.rounds):
            plain.append(launch_rehearse_only(["--no-audit"]))
            tls.append(launch_rehearse_only(with_tls))
            print(f"round {round_ + 1}: plain {plain[-1][2]:.1f} s, TLS {tls[-1][2]:.1f} s (whole run)", flush=True)
    labels = (f"{2 * NPUS} bundles reserved", f"{2 * NPUS} rank actors running", "whole rehearse-only run")
    for index, label in enumerate(labels):
        base, secured = (statistics.median(r[index] for r in runs) for runs in (plain, tls))
        print(f"{label:26}: plain {base:6.1f} s, TLS {secured:6.1f} s, ratio TLS / plain {secured / base:.2f}")


if __name__ == "__main__":
    main()
