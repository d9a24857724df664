"""Which distribution files a node platform installs: its pip --platform values, wheel tags and PEP 508 marker
environment, and which locked packages apply to it (pure)."""

from __future__ import annotations

import re

from packaging.markers import InvalidMarker, Marker
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_version, parse_sdist_filename,
                             parse_wheel_filename)

from dapo_ops.errors import UsageError
from dapo_ops.stack.index import SDIST_SUFFIXES
from dapo_ops.stack.lock import LockedPackage, normalize_name

PLATFORMS = ("aarch64", "x86_64")
# The newest glibc the nodes' wheels may need when the manifest does not say: the lock is resolved for
# manylinux_2_28 (manifest lock.platforms.<arch>.python_platform, uv's --python-platform), which the 910B hosts'
# OSes (openEuler 22.03, Ubuntu 22.04) exceed.
MANYLINUX_GLIBC_MAX = 28
# Oldest manylinux per architecture: aarch64 wheels start at manylinux2014 (= manylinux_2_17); x86_64 ones may
# still carry the manylinux2010 (2_12) and manylinux1 (2_5) legacy tags.
_MANYLINUX_GLIBC_MIN = {"aarch64": 17, "x86_64": 5}
_LEGACY_ALIASES = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def glibc_max(python_platform: str | None) -> int:
    """The glibc minor of a uv --python-platform such as 'aarch64-manylinux_2_28' (default when it names none)."""
    match = re.search(r"manylinux_2_(\d+)", python_platform or "")
    return int(match.group(1)) if match else MANYLINUX_GLIBC_MAX


def pip_platforms(arch: str, glibc: int = MANYLINUX_GLIBC_MAX) -> list[str]:
    """`pip download --platform` values for a node architecture, best first (pip takes the option several times;
    it does not expand a manylinux_2_x tag to the older ones by itself)."""
    if arch not in PLATFORMS:
        raise UsageError(f"unknown platform {arch!r} (expected one of: {', '.join(PLATFORMS)})")
    tags = []
    for minor in range(glibc, _MANYLINUX_GLIBC_MIN[arch] - 1, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in _LEGACY_ALIASES:
            tags.append(f"{_LEGACY_ALIASES[minor]}_{arch}")
    return tags + ["any"]


def python_tuple(python_version: str) -> tuple[int, int]:
    major, minor = python_version.split(".")[:2]
    return int(major), int(minor)


def target_tags(arch: str, python_version: str, glibc: int = MANYLINUX_GLIBC_MAX) -> frozenset[Tag]:
    """The wheel tags a CPython <python_version> node of this architecture installs (what pip computes from
    --platform/--python-version/--implementation cp/--abi cp3xx)."""
    version = python_tuple(python_version)
    abi = f"cp{version[0]}{version[1]}"
    platforms = pip_platforms(arch, glibc)
    return frozenset(list(cpython_tags(version, abis=[abi], platforms=platforms))
                     + list(compatible_tags(version, interpreter=abi, platforms=platforms)))


def marker_environment(arch: str, python_version: str) -> dict[str, str]:
    """PEP 508 marker values of a Linux CPython node (to evaluate `; markers` in the lock)."""
    return {"implementation_name": "cpython", "platform_python_implementation": "CPython",
            "platform_machine": arch, "platform_system": "Linux", "sys_platform": "linux", "os_name": "posix",
            "python_version": python_version, "python_full_version": f"{python_version}.0",
            "implementation_version": f"{python_version}.0", "platform_release": "", "platform_version": "",
            "extra": ""}


def applies(package: LockedPackage, environment: dict[str, str]) -> bool:
    if not package.markers:
        return True
    try:
        return Marker(package.markers).evaluate(environment)
    except InvalidMarker as exc:  # the parser accepted it; be explicit anyway
        raise UsageError(f"{package.name}: invalid marker {package.markers!r}: {exc}") from None


def select(locked: dict[str, LockedPackage], arch: str, python_version: str,
           only: tuple[str, ...] | list[str] = ()) -> list[LockedPackage]:
    """The locked packages a node of this platform installs, or the `only` ones (which must be in the lock)."""
    environment = marker_environment(arch, python_version)
    wanted = {normalize_name(name) for name in only}
    missing = sorted(wanted - set(locked))
    if missing:
        raise UsageError(f"not in the lock: {', '.join(missing)}")
    return [p for name, p in sorted(locked.items()) if (not wanted or name in wanted) and applies(p, environment)]


def file_identity(filename: str) -> tuple[str, str, frozenset[Tag] | None] | None:
    """(normalised project, canonical version, wheel tags or None for an sdist) of a distribution file name."""
    try:
        if filename.endswith(".whl"):
            name, version, _build, tags = parse_wheel_filename(filename)
            return str(name), canonicalize_version(version), frozenset(tags)
        if filename.endswith(SDIST_SUFFIXES):
            name, version = parse_sdist_filename(filename)
            return str(name), canonicalize_version(version), None
    except (InvalidWheelFilename, InvalidSdistFilename):
        pass
    return None
