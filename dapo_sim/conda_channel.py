"""A conda channel on the simulated fleet's mirror (`conda/`), for sites that give the role a channel mirror
(`dapo_conda_channel`) instead of creating the environment offline from the installer's package cache.

Layout as conda fetches a channel (conda 24.7.1 conda/core/subdir_data.py: CHANNEL/<subdir>/repodata.json and
CHANNEL/noarch/repodata.json). It lists the Python the simulated nodes run for the pinned minor version; the conda
stand-in (assets/conda_cli.py) reads the records and builds the environment with venv, so no package files are
served; each record's sha256 and md5 are those the installer stand-in records for the same file
(assets/conda_installer.py `package_digests`), as a faithful mirror of the installer's channel would serve.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from dapo_ops.manifest import StackManifest

SUBDIRS = {"aarch64": "linux-aarch64", "x86_64": "linux-64"}
NODE_PYTHON = "/usr/bin/python3"  # what the conda stand-in builds environments with


def node_python_version() -> str:
    out = subprocess.run([NODE_PYTHON, "-c", "import platform; print(platform.python_version())"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def package_digests(subdir: str, fn: str) -> dict[str, str]:
    """The digests the stand-ins give a package file that is not there: those of its name."""
    name = f"{subdir}/{fn}".encode()
    return {"sha256": hashlib.sha256(name).hexdigest(), "md5": hashlib.md5(name).hexdigest()}


def write_channel(directory: Path, manifest: StackManifest, python_version: str | None = None) -> Path:
    """Write CHANNEL/<subdir>/repodata.json (with the python record) and CHANNEL/noarch/repodata.json."""
    subdir = SUBDIRS.get(str(manifest.platform.get("arch", "aarch64")), "linux-aarch64")
    version = python_version or node_python_version()
    if not (version == manifest.python_version or version.startswith(manifest.python_version + ".")):
        version = f"{manifest.python_version}.0"
    build = "dapo_0"
    fn = f"python-{version}-{build}.conda"
    record = {"name": "python", "version": version, "build": build, "build_number": 0, "subdir": subdir,
              "depends": [], **package_digests(subdir, fn)}
    for name, packages in ((subdir, {fn: record}), ("noarch", {})):
        (directory / name).mkdir(parents=True, exist_ok=True)
        data = {"info": {"subdir": name}, "packages": {}, "packages.conda": packages, "removed": [],
                "repodata_version": 1}
        (directory / name / "repodata.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return directory
