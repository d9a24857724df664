"""Failure signatures as data: one YAML file per layer in dapo_ops/doctor/signatures/, read into typed records.

A signature names a log line that means something (a match rule), what it means, what to do about it, where the
knowledge comes from (a public source), and which other signatures it causes (the causal edges doctor follows from
a root cause to its fallout on other ranks). A bad file is refused with one line naming the file, the signature
and the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import yaml

from dapo_ops.errors import UsageError

SIGNATURE_DIR = Path(__file__).parent / "signatures"
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]*$")
# a public source: a URL, or `owner/repo` followed by a path, an issue/PR number or a named document
PUBLIC_SOURCE = re.compile(r"^(?:https?://\S+|[A-Za-z0-9][\w.-]*/[\w.-]+[ #])")
REQUIRED = ("id", "match", "meaning", "fix", "source")
OPTIONAL = ("codes", "causes", "fatal", "noise", "generic", "action", "noise_without_npus")


class SignatureError(UsageError):
    """A signature file is malformed."""


@dataclass(frozen=True)
class Match:
    """A line matches when it holds every substring of one AND-group (`all` is one group, `any` lists several), or
    when `regex` finds it; the regex's named groups become the event's details."""

    groups: tuple[tuple[str, ...], ...] = ()
    regex: re.Pattern | None = None

    def search(self, line: str) -> dict[str, str] | None:
        if self.regex is not None:
            found = self.regex.search(line)
            return None if found is None else {k: v for k, v in found.groupdict().items() if v is not None}
        return {} if any(all(part in line for part in group) for group in self.groups) else None


@dataclass(frozen=True)
class Signature:
    id: str
    layer: str
    match: Match
    meaning: str
    fix: str
    source: tuple[str, ...]
    codes: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    fatal: bool = True                  # a failure in its own right; false: a symptom other failures produce
    noise: bool = False                 # known harmless: recognised and hidden
    generic: bool = False               # matches only lines no specific signature matched
    action: str | None = None           # the command to run, {node} / {npu} / {rank} filled from the event
    noise_without_npus: bool = False    # harmless when printed on a host without NPUs
    file: str = ""


@dataclass(frozen=True)
class Catalog:
    signatures: tuple[Signature, ...]
    by_id: dict[str, Signature] = field(default_factory=dict)

    def match(self, line: str) -> tuple[Signature, dict[str, str]] | None:
        """The first specific signature that matches the line, else the first generic one."""
        fallback = None
        for signature in self.signatures:
            details = signature.match.search(line)
            if details is None:
                continue
            if not signature.generic:
                return signature, details
            fallback = fallback or (signature, details)
        return fallback

    @cached_property
    def finder(self):
        """Where in a whole text the lines are that a signature can match (anchors.CandidateFinder)."""
        from dapo_ops.doctor.anchors import CandidateFinder

        return CandidateFinder.for_catalog(self)

    def with_code(self, code: str) -> list[Signature]:
        wanted = code.upper()
        return [s for s in self.signatures if wanted in (c.upper() for c in s.codes)]


def _error(file: Path, where: str, problem: str) -> SignatureError:
    return SignatureError(f"signature file {file.name}: {where}: {problem}")


def _strings(value, file: Path, where: str, key: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i.strip() for i in items):
        raise _error(file, where, f"{key} must be a non-empty string or a list of them")
    return tuple(items)


def _parse_match(raw, file: Path, where: str) -> Match:
    if not isinstance(raw, dict) or len(raw) != 1 or next(iter(raw)) not in ("all", "any", "regex"):
        raise _error(file, where, "match must be exactly one of {all: [..]}, {any: [[..], ..]}, {regex: '..'}")
    kind, value = next(iter(raw.items()))
    if kind == "regex":
        if not isinstance(value, str) or not value:
            raise _error(file, where, "match.regex must be a non-empty string")
        try:
            return Match(regex=re.compile(value))
        except re.error as exc:
            raise _error(file, where, f"match.regex does not compile: {exc}") from None
    groups = [value] if kind == "all" else value
    if not isinstance(groups, list) or not groups:
        raise _error(file, where, f"match.{kind} must be a non-empty list")
    return Match(groups=tuple(_strings(g, file, where, f"match.{kind} entry") for g in groups))


def _flag(raw: dict, key: str, default: bool, file: Path, where: str) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise _error(file, where, f"{key} must be true or false")
    return value


def _parse_signature(raw, layer: str, file: Path, index: int) -> Signature:
    where = f"signature {index + 1}"
    if not isinstance(raw, dict):
        raise _error(file, where, "must be a mapping")
    where = f"signature {index + 1} ({raw.get('id', 'no id')})"
    missing = [k for k in REQUIRED if k not in raw]
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise _error(file, where, f"missing {', '.join(missing)}" if missing else f"unknown key {', '.join(unknown)}")
    if not isinstance(raw["id"], str) or not ID_PATTERN.match(raw["id"]):
        raise _error(file, where, "id must be lower-case letters, digits and dashes")
    source = _strings(raw["source"], file, where, "source")
    if not any(PUBLIC_SOURCE.match(s) for s in source):
        raise _error(file, where, "source must name a public URL or an upstream `owner/repo path` (or #issue)")
    action = raw.get("action")
    if action is not None and (not isinstance(action, str) or not action.strip()):
        raise _error(file, where, "action must be a non-empty string")
    return Signature(
        id=raw["id"], layer=layer, match=_parse_match(raw["match"], file, where),
        meaning=_strings(raw["meaning"], file, where, "meaning")[0].strip(),
        fix=_strings(raw["fix"], file, where, "fix")[0].strip(), source=source,
        codes=tuple(str(c) for c in raw.get("codes", ())),
        causes=_strings(raw["causes"], file, where, "causes") if raw.get("causes") else (),
        fatal=_flag(raw, "fatal", True, file, where), noise=_flag(raw, "noise", False, file, where),
        generic=_flag(raw, "generic", False, file, where), action=action,
        noise_without_npus=_flag(raw, "noise_without_npus", False, file, where), file=file.name)


def parse_file(file: Path) -> list[Signature]:
    try:
        data = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise SignatureError(f"signature file {file.name}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SignatureError(f"signature file {file.name}: not valid YAML{where}: "
                             f"{getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict) or set(data) != {"layer", "signatures"}:
        raise _error(file, "top level", "must be a mapping of exactly `layer` and `signatures`")
    if data["layer"] != file.stem:
        raise _error(file, "top level", f"layer {data['layer']!r} must be the file's name ({file.stem!r})")
    if not isinstance(data["signatures"], list) or not data["signatures"]:
        raise _error(file, "top level", "signatures must be a non-empty list")
    return [_parse_signature(raw, file.stem, file, i) for i, raw in enumerate(data["signatures"])]


def load_catalog(directory: Path = SIGNATURE_DIR) -> Catalog:
    """Every signature file of the directory, checked: ids unique, every `causes` edge pointing at a signature."""
    files = sorted(directory.glob("*.yml"))
    if not files:
        raise SignatureError(f"no signature files (*.yml) in {directory}")
    signatures = [s for f in files for s in parse_file(f)]
    by_id: dict[str, Signature] = {}
    for signature in signatures:
        if signature.id in by_id:
            raise SignatureError(f"signature file {signature.file}: id {signature.id!r} is also in "
                                 f"{by_id[signature.id].file}")
        by_id[signature.id] = signature
    for signature in signatures:
        unknown = [c for c in signature.causes if c not in by_id]
        if unknown:
            raise SignatureError(f"signature file {signature.file}: {signature.id}: causes names no signature: "
                                 f"{', '.join(unknown)}")
    return Catalog(tuple(signatures), by_id)


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return load_catalog()
