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

from dapo_ops.errors import DapoError
from dapo_ops.manifest import LockPlatform, StackManifest
from dapo_ops.stack import index, platform_tags, wheelhouse
from dapo_ops.stack.lock import parse_lock
from dapo_sim.errors import SimError
from packaging.utils import canonicalize_version

# The NPU-bound packages of the lock that the simulated fleet serves as stand-ins (they cannot run without an NPU,
# or would pull the CUDA stack): every other locked package is served for real, as the file for this machine's
# platform whose sha256 the lock lists (stack/lock holds every file's hash of each pinned release).
STANDIN_PACKAGES = ("torch", "torch-npu", "torchvision", "triton-ascend")
# What the real torch wheel requires on Linux with Python 3.11 (the pinned torch's cp311 manylinux_2_28_aarch64
# METADATA; the lock's `# via torch` lines name the same six): the stand-in declares them, so the simulated nodes
# install the same closure as the real ones.
TORCH_REQUIRES = ["filelock", "typing-extensions>=4.10.0", "sympy>=1.13.3", "networkx", "jinja2", "fsspec"]
# What the real torchvision wheel requires besides torch (the pinned torchvision's cp311 manylinux_2_28_aarch64
# wheel, METADATA: `Requires-Dist: numpy`, `torch (==<the pinned torch>)`, `pillow (!=8.3.*,>=5.3.0)`).
TORCHVISION_REQUIRES = ["numpy", "pillow!=8.3.*,>=5.3.0"]
# The CUDA triton that third-party packages pull in (the pinned torch's x86_64 wheel requires triton==3.3.1); verl's
# Ascend quick start removes it before installing triton-ascend. Not a stack pin: the stack must not have it.
TRITON_CUDA_VERSION = "3.3.1"


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
# libtorch_npu.so needs libhccl.so, found only on LD_LIBRARY_PATH (toolkit set_env.sh; docs/ascend-formats.md)
if not any(os.path.isfile(os.path.join(d, "libhccl.so")) for d in os.environ.get("LD_LIBRARY_PATH", "").split(":")):
    raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")
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
VLLM_ASCEND_C = '''"""vllm_ascend_C stand-in (dapo-ops simulated fleet): vllm-ascend's C++ custom ops, built with the CANN
toolchain, linked against ascendcl (CMakeLists.txt at the tag), found on LD_LIBRARY_PATH only."""
import os as _os

if not any(_os.path.isfile(_os.path.join(d, "libascendcl.so")) for d in _os.environ.get("LD_LIBRARY_PATH", "").split(":")):
    raise ImportError("libascendcl.so: cannot open shared object file: No such file or directory")


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
        build_wheel(directory, "torch", torch, {"torch/__init__.py": TORCH_INIT.format(version=torch)},
                    requires=TORCH_REQUIRES),
        build_wheel(directory, "torch_npu", torch_npu,
                    {"torch_npu/__init__.py": TORCH_NPU_INIT.format(version=torch_npu, torch=torch)},
                    requires=[f"torch=={torch}"]),
        build_wheel(directory, "vllm", vllm, {"vllm/__init__.py": VLLM_INIT.format(version=vllm)},
                    requires=[f"torch=={torch}"]),
        # A published vllm-ascend wheel carries the compiled custom ops.
        build_wheel(directory, "vllm_ascend", vllm_ascend,
                    {"vllm_ascend/__init__.py": f'__version__ = "{vllm_ascend}"\n',
                     "vllm_ascend/vllm_ascend_C.py": VLLM_ASCEND_C},
                    requires=[f"vllm=={vllm}", f"torch-npu=={torch_npu}"]),
    ]
    wheels.append(build_wheel(directory, "torchvision", torchvision,
                              {"torchvision/__init__.py": TORCHVISION_INIT.format(version=torchvision, torch=torch)},
                              requires=[*TORCHVISION_REQUIRES, f"torch=={torch}"]))
    wheels += triton_wheels(directory, manifest)
    return wheels


def cann_deps(manifest: StackManifest) -> dict[str, str]:
    """CANN's Python dependencies (stack manifest python.cann_deps): distribution -> pip specifier."""
    return {str(k): str(v) for k, v in ((manifest.raw.get("python") or {}).get("cann_deps") or {}).items()}


def source_lock(manifest: StackManifest) -> tuple[Path, LockPlatform]:
    """The lock the product has in force for the manifest's node platform (the nodes' lock, stack/lock)."""
    from dapo_ops.stack.lockgen import lock_dir

    platform = manifest.lock.platforms.get(manifest.platform["arch"]) if manifest.lock else None
    if platform is None or not platform.in_force:
        raise SimError(f"the stack manifest has no lock in force for {manifest.platform['arch']}")
    return lock_dir(manifest) / platform.file, platform


def fetch_locked_files(cache: Path, manifest: StackManifest, log: Path) -> list[Path]:
    """This machine's files of every locked package but the stand-ins, fetched once into `cache` by the product's
    wheelhouse (pip download, each file's sha256 checked against the lock)."""
    lock_path, platform = source_lock(manifest)
    locked = wheelhouse.read_lock(lock_path)
    only = tuple(name for name in locked if name not in STANDIN_PACKAGES)
    arch = os.uname().machine
    try:
        summary = wheelhouse.build(cache, lock_path, arch, manifest.python_version, only=only,
                                   glibc=platform_tags.glibc_max(platform.python_platform))
    except DapoError as exc:
        raise SimError(f"could not fetch the locked packages for the simulated mirror: {exc}") from None
    with open(log, "a") as out:
        out.write(f"locked files for {arch}: {summary.files} ({wheelhouse.human_size(summary.bytes)}), "
                  f"downloaded now: {len(summary.downloaded)}\n")
    wanted = {(name, canonicalize_version(locked[name].version)) for name in only}
    files = []
    for path in sorted((cache / "files").iterdir()):  # the cache may also hold files of an earlier lock
        identity = platform_tags.file_identity(path.name)
        if identity and (identity[0], identity[1]) in wanted:
            files.append(path)
    return files


def fetch_verl_wheel(cache: Path, manifest: StackManifest, log: Path) -> Path:
    """verl's released wheel at the pinned version (its trainer configuration files feed the verl stand-in repo)."""
    version = manifest.source("verl").version
    found = sorted(cache.glob(f"verl-{version}-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--only-binary=:all:",
           "--no-deps", "--dest", str(cache), f"verl=={version}"]
    with open(log, "ab") as out:
        if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
            raise SimError(f"could not fetch verl=={version} for the simulated mirror; see {log}")
    found = sorted(cache.glob(f"verl-{version}-*.whl"))
    if not found:
        raise SimError(f"pip did not leave the verl {version} wheel in {cache}")
    return found[0]


def render_sim_lock(lock_text: str, source: str, standins: list[Path]) -> str:
    """The nodes' lock with the stand-ins' own hashes in place of the real releases' (same versions): what the
    simulated inventory names as `dapo_stack_lock`. Every other line keeps the lock's hashes."""
    packages = parse_lock(lock_text, source)
    standin_hashes: dict[str, dict[str, str]] = {}
    for path in standins:
        identity = platform_tags.file_identity(path.name)
        if identity:
            standin_hashes.setdefault(identity[0], {})[identity[1]] = wheelhouse.sha256_of(path)
    lines = [f"# The simulated fleet's lock: {source} with the stand-in wheels' hashes for",
             f"# {', '.join(STANDIN_PACKAGES)} (written by `dapo-sim up`; do not edit).", ""]
    for package in sorted(packages.values(), key=lambda p: p.name):
        hashes = list(package.hashes)
        if package.name in STANDIN_PACKAGES:
            digest = standin_hashes.get(package.name, {}).get(canonicalize_version(package.version))
            if digest is None:
                raise SimError(f"no stand-in wheel for {package.name}=={package.version}, which the lock pins")
            hashes = [digest]
        head = f"{package.name}=={package.version}" + (f" ; {package.markers}" if package.markers else "")
        lines.append(" \\\n".join([head] + [f"    --hash=sha256:{h}" for h in hashes]))
    return "\n".join(lines) + "\n"


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
