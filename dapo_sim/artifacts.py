"""Deterministic stand-ins for the vendor installers (.run) and the Miniconda installer.

A stand-in is a makeself-style file: a bash header that checks the sha256 of its payload (as makeself does)
and hands the payload, a Python program, to the node's python3. The bytes depend only on the package data and
the payload sources, so the digests pinned in stack/manifest.yml hold for every build.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from dapo_sim.errors import SimError
from dapo_ops.manifest import StackManifest

ASSETS = Path(__file__).parent / "assets"
CATALOG = Path(__file__).parent / "catalog.yml"

TITLES = {
    "driver": "ASCEND DRIVER RUN PACKAGE",
    "firmware": "ASCEND-HDK-910B-NPU FIRMWARE RUN PACKAGE",
    "toolkit": "ASCEND-CANN-TOOLKIT RUN PACKAGE",
    "kernels": "ASCEND-CANN-KERNELS-910B RUN PACKAGE",
    "nnal": "ASCEND-CANN-NNAL RUN PACKAGE",
    "conda": "Miniconda3 installer",
}

HEADER = """#!/bin/bash
# {title} {version}: a stand-in built by dapo-ops for its simulated Ascend fleet. NOT a vendor package.
# makeself-style: this header checks the sha256 of the payload below the marker, then runs it with python3.
payload_sha256={digest}
marker=$(grep -an '^__DAPO_PAYLOAD__$' "$0" | head -n 1 | cut -d: -f1)
payload=$(tail -n +$((marker + 1)) "$0")
actual=$(printf '%s\\n' "$payload" | sha256sum | cut -d' ' -f1)
if [ "$actual" != "$payload_sha256" ]; then
  echo "Verifying archive integrity...  Error in SHA256 checksums: $actual is different from $payload_sha256"
  exit 1
fi
exec /usr/bin/python3 -c "$payload" "$0" "$@"
__DAPO_PAYLOAD__
"""


@dataclass(frozen=True)
class Package:
    component: str
    version: str
    file: str
    version_info: dict[str, str]
    version_file: str | None = None
    arch: str = "aarch64"

    def data(self) -> dict:
        data = {"component": self.component, "version": self.version, "title": TITLES[self.component],
                "version_info": self.version_info, "version_file": self.version_file, "arch": self.arch}
        if self.component == "conda":
            # 'py311_A.B.C-0' -> 'A.B.C'
            data["conda_version"] = self.version.split("_", 1)[-1].split("-", 1)[0]
        return data


def build(package: Package) -> bytes:
    data = json.dumps(package.data(), sort_keys=True)
    prelude = f"import json\nPACKAGE = json.loads({data!r})\n"
    if package.component == "conda":
        cli = (ASSETS / "conda_cli.py").read_text()
        payload = prelude + f"CONDA_CLI = {cli!r}\n" + (ASSETS / "conda_installer.py").read_text()
    else:
        payload = prelude + (ASSETS / "run_installer.py").read_text()
    payload = payload.rstrip("\n") + "\n"
    digest = hashlib.sha256(payload.encode()).hexdigest()
    header = HEADER.format(title=TITLES[package.component], version=package.version, digest=digest)
    return (header + payload).encode()


def pinned_packages(manifest: StackManifest) -> dict[str, Package]:
    arch = manifest.platform.get("arch", "aarch64")
    return {
        key: Package(a.component, a.version, a.file, a.version_info, a.version_file, arch)
        for key, a in manifest.artifacts.items()
    }


def load_catalog() -> dict:
    return yaml.safe_load(CATALOG.read_text())


def catalog_package(manifest: StackManifest, component: str, version: str) -> Package:
    """A driver or firmware package by version: the pinned one or one from the simulator's catalog."""
    pinned = manifest.artifact(component)
    if version == pinned.version:
        return pinned_packages(manifest)[component]
    catalog = load_catalog()
    table = catalog["drivers" if component == "driver" else "firmwares"]
    if version not in table:
        known = ", ".join([pinned.version, *table])
        raise SimError(f"the simulator knows no {component} {version} (known: {known})")
    if component == "driver":
        file = f"Ascend-hdk-910b-npu-driver_{version}_linux-aarch64.run"
    else:
        file = f"Ascend-hdk-910b-npu-firmware_{version}.run"
    info = {str(k): str(v) for k, v in table[version].items()}
    return Package(component, version, file, info, pinned.version_file)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_pinned(manifest: StackManifest, directory: Path) -> dict[str, Path]:
    """Write every pinned artifact into directory (the mirror's artifact dir); returns key -> path."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for key, package in pinned_packages(manifest).items():
        path = directory / package.file
        data = build(package)
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        path.chmod(0o644)
        paths[key] = path
    return paths


def pinned_digests(manifest: StackManifest) -> dict[str, str]:
    """The sha256 of each stand-in installer for the manifest's artifacts: what the simulated inventory gives as
    its digest file (access.write_digest_file; the manifest records the real files' digests, where they are known)."""
    return {key: digest(build(package)) for key, package in pinned_packages(manifest).items()}


def main(argv: list[str] | None = None) -> int:
    """Print the stand-in installers' digests."""
    from dapo_ops.manifest import load_manifest

    manifest = load_manifest()
    for key, sha in pinned_digests(manifest).items():
        print(f"{key:16} {sha}  {manifest.artifact(key).file}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
