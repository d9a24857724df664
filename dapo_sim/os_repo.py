"""The simulated site's OS package repository: a flat apt repository of the stack manifest's deb packages the nodes
lack, in the mirror's `os-packages/` (served over HTTP, and a controller directory for dapo_os_packages_dir).

Built the way docs/os-packages.md tells a site to build one: `apt-get install --download-only` of the packages on
a machine with the nodes' image, then `dpkg-scanpackages`. Here that machine is the controller itself, whose /usr
and package database every node starts from (dapo_sim/node.py), so what apt downloads is what a node lacks. The
.deb files are cached by the package list, fetched from the controller's apt repositories on first use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from dapo_ops.manifest import StackManifest
from dapo_ops.model import os_packages
from dapo_sim.errors import SimError
from dapo_sim.proc import run


def missing_on_nodes(manifest: StackManifest) -> list[str]:
    """The manifest's deb packages the controller's (so a fresh node's) package database does not list; the kernel
    headers are the node's stand-in directory (node.py), never a package."""
    listed = run(os_packages.DPKG_QUERY, "read the controller's package database").stdout
    return os_packages.plan(manifest.os_packages, package_format="deb", kernel=os.uname().release,
                            installed_names=os_packages.installed(listed, "deb"), kernel_headers_found=True)


def _download(names: list[str], target: Path) -> None:
    """apt-get's download of the packages and what they need that the controller lacks, into target."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "partial").mkdir(parents=True)
    command = ["apt-get", "install", "--download-only", "-y", "-q", "--no-install-recommends",
               f"-oDir::Cache::archives={partial}", *names]
    what = f"download the OS packages {', '.join(names)} with apt-get"
    if run(command, what, check=False, timeout=600).returncode != 0:
        run(["apt-get", "update", "-q"], "refresh the controller's apt lists", timeout=600)  # lists out of date
        run(command, what, timeout=600)
    shutil.rmtree(partial / "partial")
    (partial / "lock").unlink(missing_ok=True)
    partial.rename(target)


def build(target: Path, cache: Path, manifest: StackManifest) -> list[str]:
    """Write the repository at target (the .deb files and Packages); returns the package names it was built for
    (empty: the nodes lack none, and the repository holds only an empty index)."""
    names = missing_on_nodes(manifest)
    debs = cache / hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    if names and not debs.is_dir():
        debs.parent.mkdir(parents=True, exist_ok=True)
        _download(names, debs)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for deb in sorted(debs.glob("*.deb")) if names else []:
        os.link(deb, target / deb.name)
    index = run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], "index the OS packages (dpkg-dev)",
                cwd=target).stdout
    if names and not index.strip():
        raise SimError(f"the OS package repository {target} has no package for {', '.join(names)}")
    (target / "Packages").write_text(index)
    return names
