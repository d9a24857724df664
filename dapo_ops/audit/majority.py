"""Drift against the fleet's majority: a host on the pin (or on the lock) whose version differs from what more than
half of the hosts run gets a warning; off-pin and off-lock hosts already have their errors."""

from __future__ import annotations

from collections import Counter

from dapo_ops.audit.closure import BOOTSTRAP, NOT_LOCKED
from dapo_ops.audit.model import COMPONENTS, WARNING, Finding, HostReport
from dapo_ops.manifest import StackManifest
from dapo_ops.stack.lock import normalize_name


def _majority(values: list) -> tuple[object, int] | None:
    """The value more than half of the hosts have (missing ones count as None), with its count; None when no value
    has a strict majority."""
    value, count = Counter(values).most_common(1)[0]
    return (value, count) if count * 2 > len(values) else None


def _component_majority(reachable: list[HostReport], component: str, pinned: str | None) -> None:
    majority = _majority([r.components.get(component) for r in reachable])
    if majority is None:
        return
    value, count = majority
    for r in reachable:
        have = r.components.get(component)
        if have != value and have is not None and have == pinned:
            r.findings.append(Finding(r.host, None, WARNING, "differs-from-majority", component,
                                      f"{component} {have} is on the pin but {count} of {len(reachable)} hosts run "
                                      f"{value}", value, have))


def majority_findings(reports: list[HostReport], manifest: StackManifest) -> None:
    """A host on the pin that differs from the fleet's majority gets a warning (off-pin hosts already have errors)."""
    reachable = [r for r in reports if r.reachable]
    if len(reachable) < 3:
        return
    pins = manifest.pins()
    for component in COMPONENTS:
        _component_majority(reachable, component, pins.get(component))
    _closure_majority(reachable)


def _hosts_by_lock(reachable: list[HostReport]) -> dict[str, list[HostReport]]:
    """The hosts whose closure was audited against a lock, by that lock's label."""
    by_lock: dict[str, list[HostReport]] = {}
    for r in reachable:
        if r.closure is not None and r.closure["lock"] is not None:
            by_lock.setdefault(r.closure["lock"], []).append(r)
    return by_lock


def _already_found(r: HostReport, name: str, locked_off: set[tuple[str, str]]) -> bool:
    """The host is off the lock for name (an error), or has it as an extra (a warning)."""
    return (r.host, name) in locked_off or any(
        f.host == r.host and f.component == name and f.code == "dist-extra" for f in r.findings)


def _distribution_majority(platform: str, hosts: list[HostReport], name: str,
                           locked_off: set[tuple[str, str]]) -> None:
    majority = _majority([r.dists.get(name) for r in hosts])
    if majority is None:
        return
    value, count = majority
    for r in hosts:
        have = r.dists.get(name)
        if have is None or have == value or _already_found(r, name, locked_off):
            continue
        r.findings.append(Finding(r.host, None, WARNING, "differs-from-majority", name,
                                  f"{name} {have} is on the {platform} lock but {count} of {len(hosts)} "
                                  f"{platform} hosts run {value}", value, have))


def _closure_majority(reachable: list[HostReport]) -> None:
    """The same rule for every locked distribution, among the hosts of one platform whose lock is in force: a host
    on the lock whose version differs from the majority's gets a warning (an off-lock host already has an error).
    The packages the component rule above covers (torch, numpy, ...) are left to it."""
    covered = {normalize_name(c) for c in COMPONENTS}
    for platform, hosts in sorted(_hosts_by_lock(reachable).items()):
        if len(hosts) < 3:
            continue
        locked_off = {(f.host, f.component) for r in hosts for f in r.findings
                      if f.code in ("dist-off-lock", "dist-missing")}
        # every distribution any host of this lock has, less those the component majority already judged and
        # those no lock pins (the installer's own and the bootstrap tools), in a stable order
        for name in sorted({n for r in hosts for n in r.dists} - covered - NOT_LOCKED - BOOTSTRAP):
            _distribution_majority(platform, hosts, name, locked_off)
