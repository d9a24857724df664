"""The host's Python closure against the lock in force for its platform: the locks read (the edge), then every
installed distribution compared with them (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker
from packaging.version import InvalidVersion, Version

from dapo_ops.audit.collect import HostRaw
from dapo_ops.audit.model import ERROR, INFO, WARNING, Finding
from dapo_ops.errors import UsageError
from dapo_ops.manifest import StackManifest
from dapo_ops.stack.lock import LockedPackage, LockParseError, parse_lock, platform_environment
from dapo_ops.model.variables import STACK_LOCK

# Installed from their source checkouts (editable), never in the lock (manifest lock: comment), and the installer's
# own bootstrap tools when a lock does not pin them: not "extra".
NOT_LOCKED = frozenset({"vllm", "vllm-ascend", "verl"})
BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})
# `uname -m` / platform.machine() spellings of the lock platforms' names
MACHINES = {"arm64": "aarch64", "aarch64": "aarch64", "x86_64": "x86_64", "amd64": "x86_64"}

Locks = dict[str, dict[str, LockedPackage]]


_PARSED: dict[str, dict[str, LockedPackage]] = {}


def _parsed(text: str, source: str) -> dict[str, LockedPackage]:
    """parse_lock, once per text: the platform's lock and the inventory's are often the same file."""
    if text not in _PARSED:
        _PARSED[text] = parse_lock(text, source)
    return _PARSED[text]


def load_locks(manifest: StackManifest, directory=None) -> Locks:
    """The lock in force for each node platform (manifest `lock:`), parsed; reads the lock dir (the edge of
    analyze). A lock in force that cannot be read or parsed is a usage error (one line, exit 2)."""
    if manifest.lock is None:
        return {}
    from dapo_ops.stack.lockgen import lock_dir

    base = lock_dir(manifest, directory)
    locks = {}
    for platform in manifest.lock.platforms.values():
        if not platform.in_force:
            continue
        path = base / platform.file
        try:
            text = path.read_text()
        except OSError as exc:
            raise UsageError(f"the {platform.name} lock {path} is in force but cannot be read: "
                             f"{exc.strerror}") from None
        try:
            locks[platform.name] = _parsed(text, str(path))
        except LockParseError as exc:
            raise UsageError(f"the {platform.name} lock is in force but does not parse: {exc}") from None
    return locks


def load_host_locks(raws: list[HostRaw]) -> Locks:
    """The locks the inventory names per host (STACK_LOCK), parsed, keyed by their path (the edge of analyze)."""
    locks = {}
    for path in sorted({raw.lock for raw in raws if raw.lock and "python_dists" in raw.outputs}):
        try:
            locks[path] = _parsed(Path(path).read_text(), path)
        except OSError as exc:
            raise UsageError(f"the inventory's {STACK_LOCK} {path} cannot be read: {exc.strerror}") from None
        except LockParseError as exc:
            raise UsageError(f"the inventory's {STACK_LOCK} does not parse: {exc}") from None
    return locks


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _applies(package: LockedPackage, environment: dict[str, str]) -> bool:
    if not package.markers:
        return True
    try:
        return Marker(package.markers).evaluate(environment)
    except InvalidMarker:
        return True


def _no_lock_note(host: str, machine: str, manifest: StackManifest) -> Finding:
    platform = manifest.lock.platforms.get(machine) if manifest.lock else None
    why = f" ({platform.reason})" if platform is not None and platform.reason else ""
    return Finding(host, None, INFO, "lock-not-in-force", "python",
                   f"no lock in force for {machine}: the closure is not audited{why}", None, machine)


def _environment(machine: str, dists_fact: dict, manifest: StackManifest) -> dict[str, str]:
    """The marker environment of the host's platform and Python, for the lock's markers."""
    python = dists_fact.get("python") or f"{manifest.python_version}.0"
    environment = platform_environment(machine, ".".join(python.split(".")[:2]))
    environment.update(python_full_version=python, implementation_version=python)
    return environment


def _locked_finding(host: str, name: str, package: LockedPackage, have: str | None, label: str,
                    environment: dict[str, str]) -> Finding | None:
    """A locked distribution: missing (when its markers apply here) or off the lock; None when it is fine."""
    if have is None:
        if not _applies(package, environment):
            return None
        return Finding(host, None, ERROR, "dist-missing", name,
                       f"{name} is not installed (the {label} lock pins {package.version})", package.version, None)
    if _same_version(have, package.version):
        return None
    return Finding(host, None, ERROR, "dist-off-lock", name,
                   f"{name} is {have}, the {label} lock pins {package.version}", package.version, have)


def _extra_findings(host: str, installed: dict[str, str], locked: dict[str, LockedPackage],
                    label: str) -> list[Finding]:
    """Installed and not in the lock: the source installs and the bootstrap tools excepted."""
    return [Finding(host, None, WARNING, "dist-extra", name, f"{name} {have} is installed but not in the {label} lock",
                    None, have)
            for name, have in sorted(installed.items())
            if name not in locked and name not in NOT_LOCKED and name not in BOOTSTRAP]


def closure_findings(host: str, dists_fact: dict, locks: Locks, manifest: StackManifest, lock_path: str | None = None
                     ) -> tuple[dict[str, Any], list[Finding], list[Finding]]:
    """Compare the env's installed distributions with the lock in force for the host's machine (pure).

    Returns (closure summary, findings, notes): off-lock (installed version differs) and missing (locked for this
    platform by its markers, not installed) are errors; extra (installed, not in the lock; the source installs and
    the bootstrap tools excepted) is a warning; no lock in force for the platform is one note. A host whose
    inventory names its lock (STACK_LOCK, `lock_path`, parsed in `locks` under that path) is compared with it."""
    machine = MACHINES.get(dists_fact["machine"], dists_fact["machine"])
    installed = dists_fact["dists"]
    summary: dict[str, Any] = {"machine": machine, "lock": None, "installed": len(installed),
                               "off_lock": 0, "missing": 0, "extra": 0}
    locked = locks.get(lock_path) if lock_path else locks.get(machine)
    if locked is None:
        return summary, [], [_no_lock_note(host, machine, manifest)]
    label = f"{machine} ({STACK_LOCK})" if lock_path else machine
    summary["lock"] = label
    environment = _environment(machine, dists_fact, manifest)
    findings = [f for name, package in sorted(locked.items())
                if (f := _locked_finding(host, name, package, installed.get(name), label, environment))]
    findings += _extra_findings(host, installed, locked, label)
    for code, key in (("dist-off-lock", "off_lock"), ("dist-missing", "missing"), ("dist-extra", "extra")):
        summary[key] = sum(f.code == code for f in findings)
    return summary, findings, []
