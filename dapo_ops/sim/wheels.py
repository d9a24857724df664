"""Wheels for the simulated fleet's package index: real ones from the package registry (cached on first use)
and small stand-ins, built here with the stdlib, for the packages that cannot run without an NPU."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from dapo_ops.errors import SimError
from dapo_ops.manifest import StackManifest
from dapo_ops.stack import index

# Real wheels: light enough to serve for real (Ray runs for real on the simulated fleet). CANN's Python
# dependencies (stack manifest python.cann_deps) are added at their pins and replace the unpinned names here.
REAL_WHEELS_DEPS = ["hydra-core>=1.3,<1.4", "omegaconf>=2.3,<2.4", "protobuf", "pyyaml", "setuptools>=68", "wheel"]
# What the real torchvision wheel requires besides torch (the pinned torchvision's cp311 manylinux_2_28_aarch64
# wheel, METADATA: `Requires-Dist: numpy`, `torch (==<the pinned torch>)`, `pillow (!=8.3.*,>=5.3.0)`): served
# for real.
TORCHVISION_REQUIRES = ["numpy", "pillow!=8.3.*,>=5.3.0"]
# The CUDA triton that third-party packages pull in (the pinned torch's x86_64 wheel requires triton==3.3.1); verl's
# Ascend quick start removes it before installing triton-ascend. Not a stack pin: the stack must not have it.
TRITON_CUDA_VERSION = "3.3.1"
# Published as an sdist only (hydra/omegaconf need it): built into a wheel in the cache.
SDIST_ONLY = ["antlr4-python3-runtime==4.9.3"]
REAL_WHEELS_NODEPS: list[str] = []
# vllm-ascend's requirements name a torch-npu dev build of their own; installing it replaces the pinned
# torch_npu (vllm-ascend FAQ #21), which the provisioning roles must re-assert.
VLLM_ASCEND_TORCH_NPU_SUFFIX = ".dev20250724"


def vllm_ascend_torch_npu(manifest: StackManifest) -> str:
    return manifest.pinned_version("torch_npu") + VLLM_ASCEND_TORCH_NPU_SUFFIX

_FIXED_TIME = (2025, 11, 10, 0, 0, 0)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(directory: Path, dist: str, version: str, files: dict[str, str],
                requires: list[str] | None = None, summary: str = "") -> Path:
    """A pure-python wheel, byte-for-byte reproducible."""
    module = dist.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}",
        f"Summary: {summary or 'dapo-ops simulated-fleet stand-in; not the real package'}",
        "Requires-Python: >=3.9",
    ] + [f"Requires-Dist: {r}" for r in requires or []]
    contents = dict(files)
    contents[f"{info}/METADATA"] = "\n".join(metadata) + "\n"
    contents[f"{info}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: dapo-ops\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    contents[f"{info}/top_level.txt"] = "\n".join(sorted({p.split("/")[0] for p in files})) + "\n"
    record = [_record_line(name, text.encode()) for name, text in sorted(contents.items())]
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    path = directory / f"{module}-{version}-py3-none-any.whl"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(contents):
            entry = zipfile.ZipInfo(name, _FIXED_TIME)
            entry.external_attr = 0o644 << 16
            zf.writestr(entry, contents[name])
    return path


TORCH_INIT = '''"""torch stand-in (dapo-ops simulated fleet): version metadata only, no tensors."""
__version__ = "{version}"


class _Version:
    cuda = None


version = _Version()
version.__version__ = __version__


def compiled_with_cxx11_abi():
    return True
'''

TORCH_NPU_INIT = '''"""torch_npu stand-in (dapo-ops simulated fleet). Like the real extension it is bound to one torch build and
needs the CANN environment sourced."""
import os

__version__ = "{version}"
_TORCH = "{torch}"

import torch

if torch.__version__.split("+")[0] != _TORCH:
    raise ImportError(
        "torch_npu %s was built for torch %s but torch %s is installed: "
        "undefined symbol: _ZN3c1010Dispatcher17runRecordFunctionERN2at14RecordFunctionE"
        % (__version__, _TORCH, torch.__version__))
if not os.environ.get("ASCEND_TOOLKIT_HOME"):
    raise ImportError("libhccl.so: cannot open shared object file: No such file or directory "
                      "(source /usr/local/Ascend/ascend-toolkit/set_env.sh first)")
'''


TORCHVISION_INIT = '''"""torchvision stand-in (dapo-ops simulated fleet). Like the real wheel (METADATA
`Requires-Dist: torch (==X.Y.Z)`, one torch release per torchvision release) it is built against one torch; with
another torch its C++ operators do not register and the import fails as the real one does."""
__version__ = "{version}"
_TORCH = "{torch}"

import torch

if torch.__version__.split("+")[0] != _TORCH:
    raise RuntimeError("operator torchvision::nms does not exist (torchvision %s needs torch %s, found %s)"
                       % (__version__, _TORCH, torch.__version__))
'''

# triton-ascend's wheel (the pinned release's cp311 manylinux_2_27_aarch64.manylinux_2_28_aarch64 wheel, read from
# the package registry): distribution "triton-ascend", no Requires-Dist, top-level package `triton` whose __init__
# gives the release without its rc suffix as __version__, and which carries triton/backends/ascend. The CUDA
# `triton` distribution installs the same `triton/__init__.py`: whichever is installed last owns it, and
# uninstalling either deletes it (hence the recipe's `pip uninstall -y triton triton-ascend` first).
TRITON_INIT = '''"""triton stand-in (dapo-ops simulated fleet): {what}."""
__version__ = "{version}"
'''


def triton_wheels(directory: Path, manifest: StackManifest) -> list[Path]:
    from packaging.version import Version

    pinned = manifest.pinned_version("triton_ascend")
    ascend = build_wheel(directory, "triton-ascend", pinned, {
        "triton/__init__.py": TRITON_INIT.format(what="the Ascend backend build (triton-ascend)",
                                                 version=Version(pinned).base_version),
        "triton/backends/__init__.py": "",
        "triton/backends/ascend/__init__.py": "",
    })
    cuda = build_wheel(directory, "triton", TRITON_CUDA_VERSION, {
        "triton/__init__.py": TRITON_INIT.format(what="the CUDA build that third-party packages pull in",
                                                 version=TRITON_CUDA_VERSION),
        "triton/backends/__init__.py": "",
        "triton/backends/nvidia/__init__.py": "",
    })
    return [ascend, cuda]


VLLM_INIT = '''"""vLLM stand-in (dapo-ops simulated fleet): the version, and vLLM's refusal of transformers 5; no engine."""
__version__ = "{version}"

# This vLLM release was written against transformers 4.x. Its requirements/common.txt asks only for
# `transformers >= 4.56.0` (the `< 5` upper bound arrived in later releases, vllm-project/vllm issue #30466), so
# pip installs transformers 5 next to it without a conflict and the failure comes when vllm is imported (names
# transformers 5 removed; unsloth PR #3908 "Handle Transformers 5 vLLM import errors"). Closest real behaviour
# reproduced here: an ImportError when vllm is imported next to transformers >= 5.
import importlib.metadata as _metadata

try:
    _transformers = _metadata.version("transformers")
except _metadata.PackageNotFoundError:
    _transformers = None
if _transformers is not None and int(_transformers.split(".")[0]) >= 5:
    raise ImportError("vLLM %s does not support transformers %s (it needs transformers 4.x, >= 4.56.0): "
                      "cannot import the transformers 4 names vLLM uses" % (__version__, _transformers))
'''

# vllm-ascend's compiled custom-op extension (CMakeExtension "vllm_ascend.vllm_ascend_C" in its setup.py; the
# names are those vllm_ascend/device_allocator/camem.py imports from it for sleep mode).
VLLM_ASCEND_C = '''"""vllm_ascend_C stand-in (dapo-ops simulated fleet): vllm-ascend's C++ custom ops, built with the CANN toolchain."""


def init_module(malloc=None, free=None):
    return None


def python_create_and_map(*args):
    return None


def python_unmap_and_release(*args):
    return None
'''


def standin_wheels(directory: Path, manifest: StackManifest) -> list[Path]:
    torch = manifest.pinned_version("torch")
    torch_npu = manifest.pinned_version("torch_npu")
    torchvision = manifest.pinned_version("torchvision")
    vllm = manifest.source("vllm").version
    vllm_ascend = manifest.source("vllm_ascend").version
    wheels = [
        build_wheel(directory, "torch", torch, {"torch/__init__.py": TORCH_INIT.format(version=torch)}),
        build_wheel(directory, "torch_npu", torch_npu,
                    {"torch_npu/__init__.py": TORCH_NPU_INIT.format(version=torch_npu, torch=torch)},
                    requires=[f"torch=={torch}"]),
        build_wheel(directory, "torch_npu", vllm_ascend_torch_npu(manifest),
                    {"torch_npu/__init__.py": TORCH_NPU_INIT.format(version=vllm_ascend_torch_npu(manifest),
                                                                    torch=torch)},
                    requires=[f"torch=={torch}"]),
        build_wheel(directory, "vllm", vllm, {"vllm/__init__.py": VLLM_INIT.format(version=vllm)},
                    requires=[f"torch=={torch}"]),
        # A published vllm-ascend wheel carries the compiled custom ops.
        build_wheel(directory, "vllm_ascend", vllm_ascend,
                    {"vllm_ascend/__init__.py": f'__version__ = "{vllm_ascend}"\n',
                     "vllm_ascend/vllm_ascend_C.py": VLLM_ASCEND_C},
                    requires=[f"vllm=={vllm}", f"torch-npu=={vllm_ascend_torch_npu(manifest)}"]),
    ]
    wheels.append(build_wheel(directory, "torchvision", torchvision,
                              {"torchvision/__init__.py": TORCHVISION_INIT.format(version=torchvision, torch=torch)},
                              requires=[*TORCHVISION_REQUIRES, f"torch=={torch}"]))
    wheels += triton_wheels(directory, manifest)
    return wheels


def cann_deps(manifest: StackManifest) -> dict[str, str]:
    """CANN's Python dependencies (stack manifest python.cann_deps): distribution -> pip specifier."""
    return {str(k): str(v) for k, v in ((manifest.raw.get("python") or {}).get("cann_deps") or {}).items()}


def _requirement_name(requirement: str) -> str:
    return _normalize(re.split(r"[<>=!~\[;\s]", requirement, maxsplit=1)[0])


def real_requirements(manifest: StackManifest) -> tuple[list[str], list[str]]:
    pinned = cann_deps(manifest)
    names = {_normalize(name) for name in pinned} | {"numpy", "ray"}
    unpinned = [r for r in REAL_WHEELS_DEPS + TORCHVISION_REQUIRES if _requirement_name(r) not in names]
    deps = [f"ray[default]{manifest.packages['ray']}", f"numpy{manifest.packages['numpy']}",
            *dict.fromkeys(unpinned), *(f"{name}{spec}" for name, spec in pinned.items())]
    nodeps = [f"verl=={manifest.source('verl').version}", *REAL_WHEELS_NODEPS]
    return deps, nodeps


def _resolved_files(cache: Path, requirements: list[str], no_deps: bool, log: Path) -> list[str]:
    """The wheel files pip picks from the cache for these requirements (a dry run against the cache alone, with no
    pip configuration), so the mirror serves one consistent set even when the cache holds wheels of an earlier
    requirement set (a second protobuf, say, that a later `pip install` would prefer over the pinned one)."""
    import json
    import tempfile
    from urllib.parse import unquote, urlparse

    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index", "--quiet",
               "--disable-pip-version-check", "--find-links", str(cache), "--report", str(report),
               *(["--no-deps"] if no_deps else []), *requirements]
        with open(log, "ab") as out:
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode != 0:
                raise SimError(f"the cached wheels do not satisfy {' '.join(requirements)}; see {log}")
        items = json.loads(report.read_text())["install"]
    return sorted(Path(unquote(urlparse(i["download_info"]["url"]).path)).name for i in items)


def fetch_real_wheels(cache: Path, manifest: StackManifest, log: Path) -> list[Path]:
    """pip download the real wheels into cache (once; a marker records the requirement set and the files that
    satisfy it, which are the ones served)."""
    deps, nodeps = real_requirements(manifest)
    key = hashlib.sha256("\n".join(["resolved-v2", *deps, "--no-deps", *nodeps]).encode()).hexdigest()[:16]
    marker = cache / f".complete-{key}"
    files = marker.read_text().split() if marker.exists() else []
    if not files or not all((cache / name).is_file() for name in files):
        cache.mkdir(parents=True, exist_ok=True)
        built = [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps",
                 "--wheel-dir", str(cache), *SDIST_ONLY]
        with open(log, "ab") as out:
            if subprocess.run(built, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                raise SimError(f"could not build {' '.join(SDIST_ONLY)} for the simulated mirror; see {log}")
        for reqs, extra in ((deps, []), (nodeps, ["--no-deps"])):
            cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--only-binary=:all:",
                   "--find-links", str(cache), "--dest", str(cache), *extra, *reqs]
            with open(log, "ab") as out:
                result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
            if result.returncode != 0:
                raise SimError(f"could not fetch wheels for the simulated mirror ({' '.join(reqs)}); see {log}")
        files = sorted(set(_resolved_files(cache, deps, False, log) + _resolved_files(cache, nodeps, True, log)))
        marker.write_text("\n".join(files) + "\n")
    return [cache / name for name in files]


def write_index(simple: Path, wheels: list[Path], files_url: str = "../../files") -> None:
    """A PEP 503 simple index at simple/<project>/index.html, linking to files/<wheel>#sha256=... (the product's
    index writer, dapo_ops.stack.index)."""
    index.write_index(simple, wheels, files_url)


def link_files(files_dir: Path, wheels: list[Path]) -> list[Path]:
    files_dir.mkdir(parents=True, exist_ok=True)
    linked = []
    for wheel in wheels:
        target = files_dir / wheel.name
        if target.resolve() != wheel.resolve():
            if target.exists() or target.is_symlink():
                target.unlink()
            os.link(wheel, target) if wheel.stat().st_dev == files_dir.stat().st_dev else target.write_bytes(wheel.read_bytes())
        linked.append(target)
    return linked
