"""Git repositories the simulated mirror serves in place of vllm, vllm-ascend and verl.

They are small stand-ins written here (no third-party source is committed): each has the tag the stack
manifest pins and the files the provisioning roles and the launcher rely on. verl's trainer configuration is
copied at build time from the real verl wheel in the package cache, so Hydra composes the real keys.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

from dapo_ops.errors import SimError
from dapo_ops.manifest import StackManifest
from dapo_ops.sim.wheels import vllm_ascend_torch_npu

PYPROJECT = """[build-system]
requires = ["setuptools>=64", "wheel"]
build-backend = "setuptools.build_meta"
"""

GIT_ENV = {
    "GIT_AUTHOR_NAME": "dapo-ops sim", "GIT_AUTHOR_EMAIL": "sim@dapo-ops.invalid",
    "GIT_COMMITTER_NAME": "dapo-ops sim", "GIT_COMMITTER_EMAIL": "sim@dapo-ops.invalid",
    "GIT_AUTHOR_DATE": "2025-11-10T00:00:00+00:00", "GIT_COMMITTER_DATE": "2025-11-10T00:00:00+00:00",
}

VLLM_SETUP = '''"""vLLM source stand-in (dapo-ops simulated fleet)."""
import os
from setuptools import setup

target = os.environ.get("VLLM_TARGET_DEVICE", "cuda")
if target != "empty":
    raise RuntimeError(
        "Cannot find CUDA_HOME. CUDA must be available to build the package. "
        "(On Ascend build vLLM with VLLM_TARGET_DEVICE=empty.)")
setup(name="vllm", version="{version}", packages=["vllm"], install_requires=["torch=={torch}"])
'''

VLLM_ASCEND_SETUP = '''"""vllm-ascend source stand-in (dapo-ops simulated fleet)."""
from setuptools import setup

setup(name="vllm_ascend", version="{version}", packages=["vllm_ascend"],
      install_requires=["vllm=={vllm}", "torch-npu=={torch_npu}", "numpy<2.0.0"])
'''

VLLM_ASCEND_INIT = '''"""vllm-ascend stand-in: refuses to load next to a vLLM it was not released for."""
__version__ = "{version}"

import vllm

if vllm.__version__ != "{vllm}":
    raise ImportError("vllm-ascend %s requires vLLM {vllm}, found %s" % (__version__, vllm.__version__))
'''

VERL_SETUP = '''"""verl source stand-in (dapo-ops simulated fleet)."""
from setuptools import find_packages, setup

setup(name="verl", version="{version}", packages=find_packages(include=["verl", "verl.*"]),
      package_data={{"verl": ["trainer/config/*.yaml", "trainer/config/*/*.yaml"]}},
      install_requires=["hydra-core", "omegaconf"])
'''

VERL_INIT = '''"""verl stand-in package (dapo-ops simulated fleet): the real trainer configuration, no trainer code."""
__version__ = "{version}"
'''

DAPO_TRAINER_YAML = (Path(__file__).resolve().parents[1] / "job" / "recipe" / "dapo_trainer.yaml").read_text()

MAIN_DAPO = '''"""DAPO entry point stand-in (dapo-ops simulated fleet).

torch_npu is a stand-in on the simulated fleet, so no training can run. This entry point composes the job's
Hydra configuration exactly like the real recipe, prints a one-line summary and exits 0 (the documented dry mode).
"""
import sys

import hydra
from omegaconf import OmegaConf


@hydra.main(config_path="config", config_name="dapo_trainer", version_base=None)
def main(config):
    OmegaConf.resolve(config)
    print("dapo-ops dry mode: DAPO config composed (nnodes=%s, n_gpus_per_node=%s, train_batch_size=%s); "
          "no training on the simulated fleet" % (config.trainer.nnodes, config.trainer.n_gpus_per_node,
                                                  config.data.train_batch_size), flush=True)


if __name__ == "__main__":
    sys.exit(main())
'''


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


def repo_files(manifest: StackManifest, verl_wheel: Path) -> dict[str, tuple[str, dict[str, str | bytes]]]:
    torch = manifest.pinned_version("torch")
    vllm, vllm_ascend, verl = manifest.source("vllm"), manifest.source("vllm_ascend"), manifest.source("verl")
    verl_files: dict[str, str | bytes] = {
        "setup.py": VERL_SETUP.format(version=verl.version),
        "pyproject.toml": PYPROJECT,
        "verl/__init__.py": VERL_INIT.format(version=verl.version),
        "verl/trainer/__init__.py": "",
        "recipe/dapo/__init__.py": "",
        "recipe/__init__.py": "",
        "recipe/dapo/main_dapo.py": MAIN_DAPO,
        verl.extra["recipe_config"]: DAPO_TRAINER_YAML,
        verl.extra["requirements"]: "\n".join([
            "hydra-core", "omegaconf", "numpy<2.0.0", f"ray[default]{manifest.packages['ray']}", "protobuf",
            "pyyaml"]) + "\n",
        "README.md": f"verl {verl.ref} stand-in for the dapo-ops simulated fleet (trainer config from the real wheel).\n",
    }
    verl_files.update(verl_trainer_configs(verl_wheel))
    return {
        vllm.repo: (vllm.ref, {
            "setup.py": VLLM_SETUP.format(version=vllm.version, torch=torch),
            "pyproject.toml": PYPROJECT,
            "vllm/__init__.py": f'__version__ = "{vllm.version}"\n',
            "README.md": f"vLLM {vllm.ref} stand-in for the dapo-ops simulated fleet.\n",
        }),
        vllm_ascend.repo: (vllm_ascend.ref, {
            "pyproject.toml": PYPROJECT,
            "setup.py": VLLM_ASCEND_SETUP.format(version=vllm_ascend.version, vllm=vllm.version,
                                                 torch_npu=vllm_ascend_torch_npu(manifest)),
            "vllm_ascend/__init__.py": VLLM_ASCEND_INIT.format(version=vllm_ascend.version, vllm=vllm.version),
            "README.md": f"vllm-ascend {vllm_ascend.ref} stand-in for the dapo-ops simulated fleet.\n",
        }),
        verl.repo: (verl.ref, verl_files),
    }


def build_repos(git_root: Path, manifest: StackManifest, verl_wheel: Path, scratch: Path) -> dict[str, Path]:
    return {name: build_repo(git_root, name, tag, files, scratch)
            for name, (tag, files) in repo_files(manifest, verl_wheel).items()}
