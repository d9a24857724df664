"""`dapo-ops stack lock --check` (pure): the lock, the manifest and the recorded layer requirements agree. Every
disagreement is one line naming the file (and line) and both sides."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from dapo_ops.stack.lock import (LockedPackage, LockParseError, RequirementsInput, Resolution,
                                 manifest_requirements, normalize_name, parse_lock, parse_requirements_input,
                                 platform_environment, read_resolution, render_direct_in)


@dataclass(frozen=True)
class CheckReport:
    problems: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def satisfied(version: str, spec: str) -> bool:
    try:
        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False



def _check_direct(manifest, direct: tuple[str, str | None], problems: list[str]) -> RequirementsInput | None:
    """The direct requirements are the manifest's, as generated."""
    direct_name, direct_text = direct
    expected_direct = render_direct_in(manifest)
    if direct_text is None:
        problems.append(f"{direct_name}: missing (run `dapo-ops stack lock`)")
    elif direct_text != expected_direct:
        problems.append(f"{direct_name}: does not match the manifest's pins (regenerate with `dapo-ops stack lock`)")
    try:
        return parse_requirements_input(expected_direct, direct_name)
    except LockParseError as exc:
        problems.append(str(exc))
        return None


def _check_layer(manifest, layer, recorded: tuple[str, str | None], problems: list[str],
                 notes: list[str]) -> RequirementsInput | None:
    """A recorded layer input names the manifest's source at its pinned commit."""
    name, text = recorded
    if text is None:
        problems.append(f"{name}: missing (record it with `dapo-ops stack lock --sources DIR`)")
        return None
    try:
        parsed = parse_requirements_input(text, name)
    except LockParseError as exc:
        problems.append(str(exc))
        return None
    source = manifest.source(layer.source)
    want = {"repo": source.repo, "tag": source.ref, "commit": str(source.extra.get("commit", "")), "path": layer.path}
    for field_name, value in want.items():
        have = parsed.header.get(field_name)
        if have != value:
            problems.append(f"{name}: header {field_name} is {have!r}, the manifest says {value!r} "
                            f"(sources.{layer.source}); re-record it with `dapo-ops stack lock --sources DIR`")
    verified = parsed.header.get("verified", "")
    if not verified.startswith("yes"):
        how = verified[len("no"):].strip(" ()") if verified.startswith("no") else verified
        notes.append(f"{name}: the checkout's commit was not verified when recorded: {how or 'no record'}")
    return parsed


def _check_resolution(name: str, text: str, wanted: Resolution) -> list[str]:
    """The lock was resolved in the manifest's window (its header records the uv arguments it was made with)."""
    recorded = read_resolution(text)
    if recorded == wanted:
        return []
    return [f"{name}: resolved with {recorded.describe()}, the manifest's lock.resolution says {wanted.describe()} "
            "(regenerate with `dapo-ops stack lock --upgrade`)"]


def _check_locked_packages(name: str, locked: dict[str, LockedPackage], source_installed: set[str],
                           excluded: set[str]) -> list[str]:
    """Every locked package has hashes and is neither installed from a checkout nor excluded."""
    problems = []
    for package in locked.values():
        where = f"{name}:{package.line_no}: {package.name}"
        if not package.hashes:
            problems.append(f"{where}=={package.version} has no sha256 hash")
        if package.name in source_installed:
            problems.append(f"{where} is installed from its source checkout and must not be locked")
        if package.name in excluded:
            problems.append(f"{where} is excluded by the manifest (lock.exclude) but locked")
    return problems


def _check_pins(name: str, locked: dict[str, LockedPackage], pins: dict[str, str]) -> list[str]:
    problems = []
    for package_name, spec in pins.items():
        have = locked.get(package_name)
        if have is None:
            problems.append(f"{name}: {package_name} is pinned by the manifest ({spec}) but not locked")
        elif not satisfied(have.version, spec):
            problems.append(f"{name}:{have.line_no}: {package_name} is locked at {have.version}, the manifest pins "
                            f"{spec}")
    return problems


def _check_requirements(name: str, locked: dict[str, LockedPackage], requirements: RequirementsInput,
                        environment: dict[str, str], skipped: set[str]) -> list[str]:
    """Every requirement of a layer that applies on the platform is locked at a version it accepts."""
    problems = []
    for line_no, requirement in requirements.requirements:
        key = normalize_name(requirement.name)
        if key in skipped or (requirement.marker is not None and not requirement.marker.evaluate(environment)):
            continue
        have = locked.get(key)
        spec = str(requirement.specifier)
        if have is None:
            problems.append(f"{name}: {key} is required by {requirements.source}:{line_no} ({requirement}) but not "
                            "locked")
        elif spec and not satisfied(have.version, spec):
            problems.append(f"{name}:{have.line_no}: {key} is locked at {have.version}, "
                            f"{requirements.source}:{line_no} requires {spec}")
    return problems


def check_lock(manifest, locks: dict[str, tuple[str, str | None]], inputs: dict[str, tuple[str, str | None]],
               direct: tuple[str, str | None]) -> CheckReport:
    """Prove offline that the lock, the manifest and the layer requirements agree.

    locks: platform -> (file name, text or None when missing), for the platforms in force;
    inputs: recorded layer file (LockConfig.inputs) -> (path, text or None); direct: (path, text or None).
    Every disagreement is one line naming the file (and line) and both sides."""
    config = manifest.lock
    problems: list[str] = []
    notes: list[str] = []
    requirement_files = [_check_direct(manifest, direct, problems)]
    for layer in config.inputs:
        requirement_files.append(_check_layer(manifest, layer, inputs.get(layer.file, (layer.file, None)), problems,
                                              notes))
    pins = manifest_requirements(manifest)
    source_installed = {normalize_name(key) for key in manifest.sources}
    excluded = {normalize_name(e) for e in config.exclude}
    for platform, (name, text) in locks.items():
        if text is None:
            problems.append(f"{name}: missing: the manifest puts the {platform} lock in force")
            continue
        try:
            locked = parse_lock(text, name)
        except LockParseError as exc:
            problems.append(str(exc))
            continue
        problems += _check_resolution(name, text, Resolution.of(config))
        problems += _check_locked_packages(name, locked, source_installed, excluded)
        problems += _check_pins(name, locked, pins)
        environment = platform_environment(platform, manifest.python_version)
        for requirements in filter(None, requirement_files):
            problems += _check_requirements(name, locked, requirements, environment, excluded | source_installed)
    for platform in config.platforms.values():
        if not platform.in_force:
            notes.append(f"{platform.file}: the {platform.name} lock is not in force ({platform.reason})")
    return CheckReport(problems=tuple(problems), notes=tuple(notes))
