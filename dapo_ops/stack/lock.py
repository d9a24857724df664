"""Parse a hashed lock file in pip requirements format, as `uv pip compile --generate-hashes` writes it.

Pure functions only: no file system, no network. The format (uv's, the same as pip-tools'):

    # comment
    name==1.2.3 ; marker \\
        --hash=sha256:<64 hex> \\
        --hash=sha256:<64 hex>
        # via other

Every requirement is an exact `==` pin of a named distribution (no URLs, no editables: a lock that does not say
which file to install is not a lock). Names are normalised per PEP 503 (lower case, runs of -_. become '-').
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from dapo_ops.errors import UsageError

_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})$")
# options uv/pip-tools may emit in a lock that say where to look, not what to install
_IGNORED_OPTIONS = ("--index-url", "--extra-index-url", "--find-links", "-i ", "-f ", "--trusted-host")


class LockParseError(UsageError):
    """A lock file is malformed. One line naming the file and the line (exit code 2)."""

    def __init__(self, source: str, line_no: int, reason: str, line: str | None = None):
        self.source, self.line_no, self.reason = source, line_no, reason
        shown = f": {line.strip()!r}" if line is not None else ""
        super().__init__(f"{source}:{line_no}: {reason}{shown}")


@dataclass(frozen=True)
class LockedPackage:
    name: str                      # PEP 503 normalised
    version: str                   # exactly as pinned (the part after '==')
    hashes: tuple[str, ...]        # sha256 hex digests, in file order
    markers: str | None = None     # the environment marker of the line, if any
    extras: tuple[str, ...] = ()   # extras named on the line (uv usually drops them)
    line_no: int = 0               # where the requirement starts in its file


def normalize_name(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; drop comments and blank lines. Returns (first line number, text)."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw
        if not buf:
            start = number
        # a comment starts with '#' at line start or after whitespace (a '#' in a URL fragment is not one)
        stripped = (re.split(r"(?:^|\s)#", line, maxsplit=1)[0] if "#" in line else line).rstrip()
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped.strip())
        joined = " ".join(part for part in buf if part)
        buf = []
        if joined:
            out.append((start, joined))
    if buf:
        joined = " ".join(part for part in buf if part)
        if joined:
            out.append((start, joined))
    return out


def parse_lock(text: str, source: str = "lock") -> dict[str, LockedPackage]:
    """The packages a lock pins, keyed by normalised name. Raises LockParseError on the first bad line."""
    packages: dict[str, LockedPackage] = {}
    for line_no, line in _logical_lines(text):
        if line.startswith(_IGNORED_OPTIONS):
            continue
        if line.startswith("-"):
            raise LockParseError(source, line_no, "not a pinned requirement (editable, include or option)", line)
        tokens = line.split(" --")
        requirement_text, options = tokens[0].strip(), ["--" + t.strip() for t in tokens[1:]]
        hashes: list[str] = []
        for option in options:
            match = _HASH.match(option)
            if not match:
                raise LockParseError(source, line_no, f"unexpected option {option.split('=')[0]!r} "
                                     "(only --hash=sha256:<64 hex digits> may follow a requirement)", line)
            hashes.append(match.group(1))
        try:
            requirement = Requirement(requirement_text)
        except InvalidRequirement as exc:
            reason = str(exc).splitlines()[0]
            raise LockParseError(source, line_no, f"not a valid requirement ({reason})", line) from None
        if requirement.url:
            raise LockParseError(source, line_no, "a URL requirement is not a pin", line)
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
            raise LockParseError(source, line_no, f"{requirement.name} is not pinned exactly (==version)", line)
        name = normalize_name(requirement.name)
        if name in packages:
            raise LockParseError(source, line_no, f"{name} is pinned twice (first at line "
                                 f"{packages[name].line_no})", line)
        packages[name] = LockedPackage(name=name, version=specs[0].version, hashes=tuple(hashes),
                                       markers=str(requirement.marker) if requirement.marker else None,
                                       extras=tuple(sorted(requirement.extras)), line_no=line_no)
    return packages


# ------------------------------------------------------------------------------------ inputs and --check (pure)

# verl's requirements-npu.txt and setup.py install_requires at the pinned tag (sources.verl) ask for `ray[default]`:
# the lock resolves Ray with that extra so the dashboard/agent dependencies a Ray node starts with are locked too.
DIRECT_EXTRAS = {"ray": "default"}
HEADER_KEYS = ("repo", "tag", "commit", "path", "verified")


@dataclass(frozen=True)
class RequirementsInput:
    """A requirements input file (direct.in or a recorded layer file): its header and its requirements."""

    source: str
    header: dict[str, str]
    requirements: tuple[tuple[int, Requirement], ...]   # (line number, requirement)


def parse_requirements_input(text: str, source: str) -> RequirementsInput:
    """A pip requirements input. Options (-r, --extra-index-url, ...) are ignored: layer files are recorded
    verbatim from upstream and the lock is made from exactly these files. The leading comment block may carry
    `# key: value` header lines (HEADER_KEYS)."""
    header: dict[str, str] = {}
    for raw in text.splitlines():
        if not raw.startswith("#"):
            if raw.strip():
                break
            continue
        match = re.match(r"^#\s*([a-z]+):\s*(.*?)\s*$", raw)
        if match and match.group(1) in HEADER_KEYS:
            header[match.group(1)] = match.group(2)
    requirements: list[tuple[int, Requirement]] = []
    for line_no, line in _logical_lines(text):
        if line.startswith("-"):
            continue
        try:
            requirements.append((line_no, Requirement(line)))
        except InvalidRequirement as exc:
            reason = str(exc).splitlines()[0]
            raise LockParseError(source, line_no, f"not a valid requirement ({reason})", line) from None
    return RequirementsInput(source=source, header=header, requirements=tuple(requirements))


def manifest_requirements(manifest) -> dict[str, str]:
    """The direct requirements the manifest pins: normalised name -> pip specifier (python.packages, then
    python.cann_deps). A name in both must carry the same specifier."""
    out: dict[str, str] = {}
    for name, spec in list(manifest.packages.items()) + list(manifest.cann_deps.items()):
        key = normalize_name(name)
        if key in out and out[key] != spec:
            raise UsageError(f"stack manifest pins {key} twice, as {out[key]!r} and {spec!r}")
        out[key] = spec
    return out


def render_direct_in(manifest, manifest_name: str = "stack/manifest.yml") -> str:
    """stack/lock/direct.in: the direct requirements generated from the manifest (never edited by hand)."""
    lines = [f"# Generated from {manifest_name} (python.packages, python.cann_deps) by `dapo-ops stack lock`;",
             "# do not edit: change the manifest and regenerate."]
    for name, spec in manifest_requirements(manifest).items():
        extra = f"[{DIRECT_EXTRAS[name]}]" if name in DIRECT_EXTRAS else ""
        lines.append(f"{name}{extra}{spec}")
    return "\n".join(lines) + "\n"


def setup_install_requires(text: str, source: str) -> list[str]:
    """The `install_requires = [...]` list literal of a setup.py (verl's setup.py at the pinned tag assigns one),
    read with ast, never executed."""
    try:
        tree = ast.parse(text, filename=source)
    except SyntaxError as exc:
        raise LockParseError(source, exc.lineno or 0, "not valid Python") from None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "install_requires"
                                                 for t in node.targets)):
            if not isinstance(node.value, ast.List) or not all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts):
                raise LockParseError(source, node.lineno, "install_requires is not a list of strings")
            return [e.value for e in node.value.elts]
    raise LockParseError(source, 0, "no `install_requires = [...]` assignment")


def pyproject_build_requires(text: str, source: str) -> list[str]:
    """The `[build-system] requires` list of a pyproject.toml."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockParseError(source, 0, f"not valid TOML ({exc})") from None
    requires = (data.get("build-system") or {}).get("requires")
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise LockParseError(source, 0, "no [build-system] requires list")
    return requires


def layer_content(path: str, text: str, source: str, build_exclude: dict[str, str] | None = None) -> str:
    """What is recorded of a layer file: a requirements file verbatim, a setup.py as its install_requires, a
    pyproject.toml as its build requirements (the editable installs build without isolation, against what the env
    has, so these come from the lock), less those the manifest leaves out (lock.build_exclude), kept as comments."""
    name = Path(path).name
    if name == "setup.py":
        return "# install_requires of setup.py, one per line\n" + "\n".join(setup_install_requires(text, source))
    if name == "pyproject.toml":
        lines = ["# [build-system] requires of pyproject.toml, one per line"]
        excluded = {normalize_name(k): v for k, v in (build_exclude or {}).items()}
        for requirement in pyproject_build_requires(text, source):
            reason = excluded.get(normalize_name(Requirement(requirement).name))
            lines.append(f"# left out ({reason}): {requirement}" if reason else requirement)
        return "\n".join(lines)
    return text


def render_layer_input(repo: str, tag: str, commit: str, path: str, content: str, verified: str) -> str:
    """A layer's requirements recorded from its checkout, verbatim, below a header naming where they came from."""
    header = ["# Recorded by `dapo-ops stack lock --sources` from a source checkout: do not edit.",
              f"# repo: {repo}", f"# tag: {tag}", f"# commit: {commit}", f"# path: {path}", f"# verified: {verified}",
              "#"]
    return "\n".join(header) + "\n" + content.rstrip("\n") + "\n"


def platform_environment(machine: str, python_version: str) -> dict[str, str]:
    """PEP 508 marker environment of a Linux node platform (what uv --python-platform <machine>-manylinux
    --python-version assumes)."""
    return {"platform_machine": machine, "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "platform_python_implementation": "CPython", "implementation_name": "cpython",
            "python_version": python_version, "python_full_version": f"{python_version}.0",
            "implementation_version": f"{python_version}.0", "platform_release": "", "platform_version": "",
            "extra": ""}


# The lock's header lines that record the resolution window it was made with (uv's own header names only the
# custom compile command).
_WINDOW_LINE = re.compile(r"^#\s*(exclude-newer|exclude-newer-package):\s*(\S.*?)\s*$")


@dataclass(frozen=True)
class Resolution:
    """The window a lock was resolved in: uv --exclude-newer and --exclude-newer-package PACKAGE=INSTANT."""

    exclude_newer: str | None
    exclude_newer_package: tuple[tuple[str, str], ...] = ()   # (normalised package, instant), sorted

    @classmethod
    def of(cls, config) -> "Resolution":
        """What the manifest's `lock.resolution` asks for."""
        return cls(config.exclude_newer, tuple(sorted((normalize_name(name), before) for name, (before, _)
                                                      in config.exclude_newer_package.items())))

    def uv_arguments(self) -> list[str]:
        arguments = ["--exclude-newer", self.exclude_newer] if self.exclude_newer else []
        for name, before in self.exclude_newer_package:
            arguments += ["--exclude-newer-package", f"{name}={before}"]
        return arguments

    def header_lines(self) -> list[str]:
        lines = [f"# exclude-newer: {self.exclude_newer}"] if self.exclude_newer else []
        return lines + [f"# exclude-newer-package: {name}={before}" for name, before in self.exclude_newer_package]

    def describe(self) -> str:
        if not self.exclude_newer:
            return "no --exclude-newer date"
        extra = "".join(f", {name} before {before}" for name, before in self.exclude_newer_package)
        return f"--exclude-newer {self.exclude_newer}{extra}"


def read_resolution(text: str) -> Resolution:
    """The window recorded in a lock's leading comment block (none when absent)."""
    exclude_newer = None
    packages = []
    for raw in text.splitlines():
        if raw.strip() and not raw.startswith("#"):
            break
        match = _WINDOW_LINE.match(raw)
        if match and match.group(1) == "exclude-newer":
            exclude_newer = match.group(2)
        elif match:
            name, _, before = match.group(2).partition("=")
            packages.append((normalize_name(name.strip()), before.strip()))
    return Resolution(exclude_newer, tuple(sorted(packages)))


def stamp_resolution(text: str, resolution: Resolution) -> str:
    """The lock with the window's header lines after uv's own header (the leading comment block)."""
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    kept = [line for line in lines[:at] if not _WINDOW_LINE.match(line)]
    return "\n".join(kept + resolution.header_lines() + lines[at:]) + "\n"


def diff_locks(old: dict[str, LockedPackage], new: dict[str, LockedPackage]) -> list[tuple[str, str, str, str]]:
    """(change, name, old version, new version) for every added / removed / changed package, by name."""
    rows = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before is None:
            rows.append(("added", name, "", after.version))
        elif after is None:
            rows.append(("removed", name, before.version, ""))
        elif before.version != after.version:
            rows.append(("changed", name, before.version, after.version))
        elif set(before.hashes) != set(after.hashes):
            rows.append(("rehashed", name, before.version, after.version))
    return rows
