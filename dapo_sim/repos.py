"""Git repositories the simulated mirror serves in place of vllm, vllm-ascend and verl.

They are small stand-ins written here (no third-party source is committed): each has the tag the stack
manifest pins and the files the provisioning roles and the launcher rely on. verl's trainer configuration is
copied at build time from the real verl wheel in the package cache, so Hydra composes the real keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from dapo_sim.artifacts import ASSETS
from dapo_sim.errors import SimError
from dapo_ops.manifest import StackManifest
from dapo_sim.standin_dapo import DAPO_TRAINER_YAML, MAIN_DAPO
from dapo_sim.standin_sources import (VERL_INIT, VERL_SETUP, VLLM_ASCEND_CAMEM, VLLM_ASCEND_INIT, VLLM_ASCEND_SETUP,
                                         VLLM_ASCEND_WORKER, VLLM_SETUP)
from dapo_sim.wheels import VLLM_ASCEND_C, VLLM_INIT

PYPROJECT = """[build-system]
requires = {requires}
build-backend = "setuptools.build_meta"
"""

# The distributions the stand-in source repositories install (vLLM, vllm-ascend and verl at their pinned tags).
STANDIN_SOURCES = ("vllm", "vllm-ascend", "verl")

GIT_ENV = {
    "GIT_AUTHOR_NAME": "dapo-sim", "GIT_AUTHOR_EMAIL": "sim@dapo-ops.invalid",
    "GIT_COMMITTER_NAME": "dapo-sim", "GIT_COMMITTER_EMAIL": "sim@dapo-ops.invalid",
    "GIT_AUTHOR_DATE": "2025-11-10T00:00:00+00:00", "GIT_COMMITTER_DATE": "2025-11-10T00:00:00+00:00",
}

def _git(args: list[str], cwd: Path) -> None:
    env = dict(os.environ, **GIT_ENV)
    result = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SimError(f"git {' '.join(args)} failed in {cwd}: {result.stderr.strip()}")


def _tree_key(files: dict[str, str | bytes], tag: str) -> str:
    h = hashlib.sha256(tag.encode())
    for name in sorted(files):
        data = files[name]
        h.update(name.encode() + b"\0" + (data if isinstance(data, bytes) else data.encode()) + b"\0")
    return h.hexdigest()


def build_repo(git_root: Path, name: str, tag: str, files: dict[str, str | bytes], scratch: Path) -> Path:
    """A bare repo git_root/<name>.git with one commit tagged `tag`, served over dumb HTTP."""
    bare = git_root / f"{name}.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    key = _tree_key(files, tag)
    stamp = bare / "dapo-sim-key"
    if stamp.exists() and stamp.read_text().strip() == key:
        return bare
    work = scratch / name.replace("/", "_")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(bare, ignore_errors=True)
    work.mkdir(parents=True)
    for rel, data in files.items():
        path = work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    _git(["init", "-q", "-b", "main"], work)
    _git(["add", "-A"], work)
    _git(["commit", "-q", "-m", f"{name} {tag} (dapo-ops simulated-fleet stand-in)"], work)
    _git(["tag", tag], work)
    git_root.mkdir(parents=True, exist_ok=True)
    _git(["clone", "-q", "--bare", str(work), str(bare)], scratch)
    _git(["update-server-info"], bare)
    stamp.write_text(key + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return bare


def verl_trainer_configs(wheel: Path) -> dict[str, bytes]:
    """verl/trainer/config/**.yaml from the real verl wheel (data, read at build time, never committed)."""
    files = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("verl/trainer/config/") and name.endswith(".yaml"):
                files[name] = zf.read(name)
    if not files:
        raise SimError(f"{wheel.name} has no verl/trainer/config/*.yaml")
    return files


def recorded_layer(manifest: StackManifest, source: str, path: str) -> str:
    """A source's requirements file at its pinned tag, as `dapo-ops stack lock --sources` recorded it in the lock's
    inputs (stack/lock/<source>*.in, below the header naming repo, tag and commit); a setup.py as its
    install_requires, one per line. The stand-in repositories carry these, so the simulated nodes resolve the
    real dependency closure."""
    from dapo_ops.stack.lockgen import lock_dir

    layer = next((l for l in manifest.lock.inputs if l.source == source and l.path == path), None) \
        if manifest.lock else None
    if layer is None:
        raise SimError(f"the stack lock records no {path} of {source}")
    text = (lock_dir(manifest) / layer.file).read_text()
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#") and lines[0].strip() != "#":
        lines.pop(0)
    if lines and lines[0].strip() == "#":
        lines.pop(0)
    return "".join(lines)


def recorded_build_requires(manifest: StackManifest, source: str) -> list[str]:
    """The checkout's real [build-system] requires, from its recorded pyproject layer (the lines left out of the
    lock are kept there as comments and belong to the real file too)."""
    requires = []
    for line in recorded_layer(manifest, source, "pyproject.toml").splitlines():
        if line.startswith("# left out ("):
            requires.append(line.rsplit("): ", 1)[1].strip())
        elif line.strip() and not line.startswith("#"):
            requires.append(line.strip())
    return requires


def pyproject(manifest: StackManifest, source: str) -> str:
    return PYPROJECT.format(requires=json.dumps(recorded_build_requires(manifest, source)))


def repo_files(manifest: StackManifest, verl_wheel: Path) -> dict[str, tuple[str, dict[str, str | bytes]]]:
    vllm, vllm_ascend, verl = manifest.source("vllm"), manifest.source("vllm_ascend"), manifest.source("verl")
    verl_files: dict[str, str | bytes] = {
        "setup.py": VERL_SETUP.format(install_requires=[
            line.split("#", 1)[0].strip() for line in recorded_layer(manifest, "verl", "setup.py").splitlines()
            if line.split("#", 1)[0].strip()]),
        "pyproject.toml": pyproject(manifest, "verl"),
        "verl/__init__.py": VERL_INIT,
        # What verl's verl/version/version holds at the pinned tag (the manifest records it).
        verl.extra.get("declared_version_file", "verl/version/version"):
            str(verl.extra.get("declared_version") or verl.version) + "\n",
        "verl/trainer/__init__.py": "",
        "recipe/dapo/__init__.py": "",
        "recipe/__init__.py": "",
        "recipe/dapo/main_dapo.py": MAIN_DAPO,
        "recipe/dapo/sim_checkpoints.py": (ASSETS / "verl_checkpoints.py").read_text(),
        "recipe/dapo/sim_npu_load.py": (ASSETS / "verl_npu_load.py").read_text(),
        verl.extra["recipe_config"]: DAPO_TRAINER_YAML,
        # The real file at the pinned tag (recorded in the lock's inputs).
        verl.extra["requirements"]: recorded_layer(manifest, "verl", verl.extra["requirements"]),
        "README.md": f"verl {verl.ref} stand-in for the dapo-ops simulated fleet (trainer config from the real wheel).\n",
    }
    verl_files.update(verl_trainer_configs(verl_wheel))
    return {
        vllm.repo: (vllm.ref, {
            "setup.py": VLLM_SETUP.format(version=vllm.version),
            "requirements/common.txt": recorded_layer(manifest, "vllm", "requirements/common.txt"),
            "pyproject.toml": pyproject(manifest, "vllm"),
            "vllm/__init__.py": VLLM_INIT.format(version=vllm.version),
            "README.md": f"vLLM {vllm.ref} stand-in for the dapo-ops simulated fleet.\n",
        }),
        vllm_ascend.repo: (vllm_ascend.ref, {
            "pyproject.toml": pyproject(manifest, "vllm_ascend"),
            "setup.py": VLLM_ASCEND_SETUP.format(version=vllm_ascend.version, extension=VLLM_ASCEND_C),
            "requirements.txt": recorded_layer(manifest, "vllm_ascend", "requirements.txt"),
            ".gitignore": "vllm_ascend/vllm_ascend_C*\n",  # built into the checkout, like the real library
            "vllm_ascend/__init__.py": VLLM_ASCEND_INIT.format(version=vllm_ascend.version, vllm=vllm.version),
            "vllm_ascend/device_allocator/__init__.py": "",
            "vllm_ascend/device_allocator/camem.py": VLLM_ASCEND_CAMEM,
            "vllm_ascend/worker/__init__.py": "",
            "vllm_ascend/worker/worker_v1.py": VLLM_ASCEND_WORKER,
            "README.md": f"vllm-ascend {vllm_ascend.ref} stand-in for the dapo-ops simulated fleet.\n",
        }),
        verl.repo: (verl.ref, verl_files),
    }


def build_repos(git_root: Path, manifest: StackManifest, verl_wheel: Path, scratch: Path) -> dict[str, Path]:
    return {name: build_repo(git_root, name, tag, files, scratch)
            for name, (tag, files) in repo_files(manifest, verl_wheel).items()}


def write_bundles(git_root: Path, manifest: StackManifest, directory: Path) -> list[Path]:
    """Each source's pinned tag as a git bundle in `directory` (the mirror's artifacts), as a site without a git server
    makes them: `git bundle create NAME TAG` in a clone (dapo_git_bundles)."""
    from dapo_ops.stack.artifacts import bundle_name

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for source in manifest.sources.values():
        path = directory / bundle_name(source.repo, source.ref)
        _git(["bundle", "create", "-q", str(path), source.ref], git_root / f"{source.repo}.git")
        path.chmod(0o644)
        written.append(path)
    return written


def tag_commits(git_root: Path, manifest: StackManifest) -> dict[str, str]:
    """Source key -> the commit the stand-in repository's pinned tag names.

    The stand-ins cannot carry the upstream commits the manifest pins, so the simulated inventory declares these
    (`dapo_source_commits`), as a site whose git server serves other commits for the pinned tags would."""
    commits = {}
    for key, source in manifest.sources.items():
        bare = git_root / f"{source.repo}.git"
        result = subprocess.run(["git", "rev-parse", f"{source.ref}^{{commit}}"], cwd=bare, capture_output=True,
                                text=True)
        if result.returncode != 0:
            raise SimError(f"git rev-parse {source.ref} failed in {bare}: {result.stderr.strip()}")
        commits[key] = result.stdout.strip()
    return commits
