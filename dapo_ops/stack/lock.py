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

import re
from dataclasses import dataclass

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
        stripped = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].rstrip()
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
