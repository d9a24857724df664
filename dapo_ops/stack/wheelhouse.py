"""An offline wheelhouse for air-gapped sites: every file the lock pins for a node platform, downloaded with its
sha256 checked against the lock, and a PEP 503 simple index over them (dapo_ops.stack.index).

    DIR/files/<wheel or sdist>            the distribution files
    DIR/simple/<project>/index.html       the index pip reads (`index-url = http://host:port/simple` when DIR is
                                          served over HTTP, or `file:///abs/DIR/simple`)

The downloads are done by pip itself (`pip download --only-binary=:all: --no-deps --platform ... --require-hashes`):
pip selects the file for the target platform and refuses one whose sha256 is not in the lock. Nothing here
resolves anything: the lock is the closure.

The planning (which files a platform accepts, which present files are good, which to fetch) is pure; `build`
does the I/O. Files are downloaded into a temporary directory inside DIR and renamed into files/ once verified,
so an interrupted run leaves nothing half-written, and a second run downloads nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from packaging.tags import Tag
from packaging.utils import canonicalize_name, canonicalize_version

from dapo_ops.errors import DapoError, UsageError
from dapo_ops.stack.index import sha256_of, write_index
from dapo_ops.stack.lock import LockedPackage, parse_lock
from dapo_ops.stack.platform_tags import (MANYLINUX_GLIBC_MAX, file_identity, pip_platforms, python_tuple, select,
                                          target_tags)

# What the source installs need to build (the roles install vLLM, vllm-ascend and verl editable from their
# checkouts, with build isolation, so pip fetches these from the index). Names only; the lock gives versions.
#  - vllm-ascend at its pinned tag (manifest sources.vllm_ascend.ref), vllm-project/vllm-ascend ./pyproject.toml
#    [build-system] requires (mirrored by its requirements.txt).
#  - verl at its pinned tag (manifest sources.verl.ref), volcengine/verl ./pyproject.toml [build-system] requires.
#  - vLLM: [build-system] requires of vllm-project/vllm ./pyproject.toml as its 0.10/0.11 releases name them
#    (cmake, ninja, packaging, setuptools, setuptools-scm, torch, wheel, jinja2; NOT read at the pinned tag here:
#    no clone of vLLM is available; its torch pin there is CUDA torch's, which the lock's torch replaces only
#    without build isolation).
BUILD_REQUIRES = {
    "vllm-ascend": ("cmake", "decorator", "einops", "numpy", "packaging", "pip", "pybind11", "pyyaml", "scipy",
                    "setuptools", "setuptools-scm", "torch-npu", "torch", "torchvision", "wheel", "msgpack",
                    "quart", "numba", "opencv-python-headless"),
    "verl": ("setuptools", "wheel"),
    "vllm": ("cmake", "ninja", "packaging", "setuptools", "setuptools-scm", "torch", "wheel", "jinja2"),
}


class WheelhouseError(DapoError):
    """A download failed or a file does not match the lock (exit code 1). Names the package."""


# ------------------------------------------------------------------------------------------------ pure planning


@dataclass(frozen=True)
class Step:
    package: LockedPackage
    action: str                        # "keep" | "download" | "replace"
    good: tuple[str, ...] = ()         # present files of this package whose sha256 the lock lists
    bad: tuple[str, ...] = ()          # present files of this package whose sha256 it does not


def plan(packages: list[LockedPackage], present: dict[str, str], tags: frozenset[Tag]) -> list[Step]:
    """What to do for each package given the files present (file name -> sha256): keep when a file for the
    platform with a locked hash is there, replace when a file for it is there with another hash, else download.
    Files of other platforms (a wheelhouse shared by aarch64 and x86_64) are not considered."""
    by_release: dict[tuple[str, str], list[str]] = {}
    for filename in present:
        identity = file_identity(filename)
        if identity is None:
            continue
        name, version, file_tags = identity
        if file_tags is None or file_tags & tags:
            by_release.setdefault((name, version), []).append(filename)
    steps = []
    for package in packages:
        files = sorted(by_release.get((package.name, canonicalize_version(package.version)), []))
        good = tuple(f for f in files if present[f] in package.hashes)
        bad = tuple(f for f in files if present[f] not in package.hashes)
        action = "replace" if bad else "keep" if good else "download"
        steps.append(Step(package, action, good, bad))
    return steps


def requirement_line(package: LockedPackage) -> str:
    """One line of a pip requirements file in hash-checking mode."""
    return f"{package.name}=={package.version} " + " ".join(f"--hash=sha256:{h}" for h in package.hashes)


def pip_download_command(dest: Path, requirements: Path, arch: str, python_version: str,
                         sdist_of: str | None = None, python: str = sys.executable, glibc: int = MANYLINUX_GLIBC_MAX,
                         index_url: str | None = None, extra_index_urls: tuple[str, ...] = ()) -> list[str]:
    """The pip command that fetches one locked file. Wheels: for the node platform only (several --platform
    values, pip download's documented way to name every platform tag the target accepts). An sdist (a package
    published without a wheel for the platform): --no-binary for that package only, platform-independent."""
    command = [python, "-m", "pip", "download", "--no-deps", "--require-hashes", "--progress-bar", "off",
               "--disable-pip-version-check", "--dest", str(dest), "-r", str(requirements)]
    if index_url:
        command += ["--index-url", index_url]
    for url in extra_index_urls:
        command += ["--extra-index-url", url]
    if sdist_of:
        return command + [f"--no-binary={sdist_of}"]
    version = python_tuple(python_version)
    command += ["--only-binary=:all:", "--python-version", f"{version[0]}.{version[1]}", "--implementation", "cp",
                "--abi", f"cp{version[0]}{version[1]}"]
    for platform in pip_platforms(arch, glibc):
        command += ["--platform", platform]
    return command


def missing_build_requirements(locked: dict[str, LockedPackage]) -> dict[str, list[str]]:
    """Build dependency -> the source installs that need it, for those the lock does not pin."""
    missing: dict[str, list[str]] = {}
    for source, names in BUILD_REQUIRES.items():
        for name in names:
            if canonicalize_name(name) not in locked:
                missing.setdefault(canonicalize_name(name), []).append(source)
    return dict(sorted(missing.items()))


def pip_failure(package: LockedPackage, output: str) -> tuple[str, str]:
    """(kind, one-line reason) from pip's output: kind is 'hash', 'unavailable' or 'other'."""
    if "DO NOT MATCH THE HASHES" in output:
        got = re.search(r"Got\s+([0-9a-f]{64})", output)
        return "hash", (f"{package.name}=={package.version}: the downloaded file's sha256 "
                        f"{got.group(1) if got else '(unknown)'} is not one the lock lists; refused")
    if "No matching distribution found" in output or "Could not find a version that satisfies" in output:
        return "unavailable", f"{package.name}=={package.version}: no file for this platform on the index"
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR:")]
    reason = errors[-1][len("ERROR:"):].strip() if errors else (output.strip().splitlines() or ["pip failed"])[-1]
    return "other", f"{package.name}=={package.version}: {reason}"


# ---------------------------------------------------------------------------------------------------------- I/O


@dataclass
class Summary:
    directory: str
    platform: str
    lock: str
    packages: int = 0
    kept: int = 0
    downloaded: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)     # files removed because their sha256 was not locked
    sdists: list[str] = field(default_factory=list)       # packages with no wheel for the platform
    files: int = 0                                        # distribution files in the wheelhouse
    bytes: int = 0                                        # their total size
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"directory": self.directory, "platform": self.platform, "lock": self.lock,
                "packages": self.packages, "kept": self.kept, "downloaded": self.downloaded,
                "replaced": self.replaced, "sdists": self.sdists, "files": self.files, "bytes": self.bytes,
                "index": str(Path(self.directory) / "simple"), "warnings": self.warnings}


def read_lock(path: Path) -> dict[str, LockedPackage]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"lock file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read lock file {path}: {exc}") from None
    return parse_lock(text, str(path))


def _prepare_directory(directory: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "files").mkdir(exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-")
        probe.close()
    except OSError as exc:
        raise UsageError(f"wheelhouse directory {directory} is not writable: {exc.strerror or exc}") from None
    return directory / "files"


def _present(files_dir: Path) -> dict[str, str]:
    return {p.name: sha256_of(p) for p in sorted(files_dir.iterdir()) if p.is_file() and not p.name.startswith(".")}


def _fetch(step: Step, workdir: Path, arch: str, python_version: str,
           run: Callable[..., subprocess.CompletedProcess], **pip_options) -> tuple[list[Path], bool]:
    """Download one package's file into workdir (a fresh directory). Returns (files, is_sdist)."""
    package = step.package
    requirements = workdir / "requirements.txt"
    requirements.write_text(requirement_line(package) + "\n")
    dest = workdir / "dl"
    for sdist_of in (None, package.name):
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        command = pip_download_command(dest, requirements, arch, python_version, sdist_of=sdist_of, **pip_options)
        result = run(command, capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"})
        if result.returncode == 0:
            files = sorted(dest.iterdir())
            if not files:
                raise WheelhouseError(f"{package.name}=={package.version}: pip downloaded no file")
            for path in files:  # pip checked them; a file that is not locked never reaches files/
                if sha256_of(path) not in package.hashes:
                    raise WheelhouseError(f"{package.name}=={package.version}: {path.name} has a sha256 the "
                                          "lock does not list; refused")
            return files, sdist_of is not None
        kind, reason = pip_failure(package, result.stdout + "\n" + result.stderr)
        if kind != "unavailable" or sdist_of is not None:
            raise WheelhouseError(reason if kind != "unavailable"
                                  else f"{package.name}=={package.version}: neither a wheel for {arch} "
                                       f"(cp{python_version.replace('.', '')}) nor an sdist on the index")
    raise AssertionError("unreachable")


def _note_sdist(summary: Summary, package: LockedPackage, arch: str) -> None:
    summary.sdists.append(f"{package.name}=={package.version}")
    summary.warnings.append(f"{package.name}=={package.version} has no wheel for {arch}: its sdist is in the "
                            "wheelhouse and is built on the node at install time (its build backend must be there too)")


def _download(step: Step, directory: Path, files_dir: Path, present: dict[str, str], summary: Summary,
              fetch: Callable[[Path], tuple[list[Path], bool]]) -> None:
    """One step: fetch into a temporary directory inside DIR, then rename the verified files into files/ and drop
    the bad files they replace (an interrupted run leaves nothing half-written)."""
    workdir = Path(tempfile.mkdtemp(dir=directory, prefix=".download-"))
    try:
        files, is_sdist = fetch(workdir)
        names = {f.name for f in files}
        for path in files:
            os.replace(path, files_dir / path.name)
            present[path.name] = sha256_of(files_dir / path.name)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for stale in step.bad:
        if stale not in names:
            (files_dir / stale).unlink(missing_ok=True)
            present.pop(stale, None)
    summary.replaced += list(step.bad)
    summary.downloaded += sorted(names)
    if is_sdist:
        _note_sdist(summary, step.package, summary.platform)


def build(directory: Path, lock_path: Path, arch: str, python_version: str, only: tuple[str, ...] = (),
          progress: Callable[[str, int, int], None] | None = None,
          run: Callable[..., subprocess.CompletedProcess] = subprocess.run, glibc: int = MANYLINUX_GLIBC_MAX,
          index_url: str | None = None, extra_index_urls: tuple[str, ...] = ()) -> Summary:
    """Bring DIR's wheelhouse up to the lock for this platform; `progress(label, done, total)` is told each step.
    `glibc` is the manylinux_2_<glibc> the lock was resolved for; the index URLs are the lock's (manifest lock)."""
    pip_platforms(arch, glibc)  # validates the platform
    locked = read_lock(lock_path)
    packages = select(locked, arch, python_version, only)
    files_dir = _prepare_directory(directory)
    tags = target_tags(arch, python_version, glibc)
    pip_options = {"glibc": glibc, "index_url": index_url, "extra_index_urls": tuple(extra_index_urls)}
    present = _present(files_dir)
    steps = plan(packages, present, tags)
    summary = Summary(str(directory), arch, str(lock_path), packages=len(packages))
    if not only:
        for name, sources in missing_build_requirements(locked).items():
            summary.warnings.append(f"build dependency {name} (of {', '.join(sources)}) is not in the lock: "
                                    "the source install would need it from another index")
    todo = [s for s in steps if s.action != "keep"]
    summary.kept = len(steps) - len(todo)
    for step in steps:
        if step.action == "keep" and not any(f.endswith(".whl") for f in step.good):
            _note_sdist(summary, step.package, arch)
    for done, step in enumerate(todo):
        if progress:
            progress(f"{step.package.name}=={step.package.version}", done, len(todo))
        _download(step, directory, files_dir, present, summary,
                  lambda dest: _fetch(step, dest, arch, python_version, run, **pip_options))
    if progress:
        progress("", len(todo), len(todo))
    distribution_files = [files_dir / name for name in sorted(present) if file_identity(name)]
    write_index(directory / "simple", distribution_files, digests=present)
    summary.files = len(distribution_files)
    summary.bytes = sum(path.stat().st_size for path in distribution_files)
    return summary


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
