"""The vendor files a site downloaded: checked against the pin and recorded as sha256sum lines.

`dapo-ops stack artifacts DIR` hashes the pinned installers in DIR and writes their digests to a site file (the
format `sha256sum` writes and `sha256sum -c` reads). The inventory names that file (variables.ARTIFACT_DIGEST_FILE);
the artifact role (through the dapo_recorded_digests filter) and the inventory checks read it back, so Ansible and
dapo-ops take a file's digest from the same place: the stack manifest's where it records one, else the site file's.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from dapo_ops.errors import UsageError
from dapo_ops.manifest import Artifact, StackManifest

DIGEST_FILE_NAME = "dapo-artifacts.sha256"   # the file `stack artifacts DIR` writes into DIR unless told otherwise
MAX_DIGEST_FILE_BYTES = 1 << 20
_LINE = re.compile(r"(?P<sha>[0-9A-Fa-f]{64}) [ *](?P<name>[^/\x00-\x1f]+)")
_CHUNK = 1 << 20


def parse_digest_file(text: str, source: str) -> dict[str, str]:
    """File name -> sha256 (lower case) from sha256sum's lines; blank lines and `#` comments are skipped. A line
    that is none of these, or a name given two different digests, is a UsageError naming the file and line."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _LINE.fullmatch(line.rstrip("\r"))
        if match is None:
            raise UsageError(f"{source}:{number}: not a sha256sum line (`<64 hex digits>  <file name>`): "
                             f"{line.strip()[:80]!r}")
        name, sha = match["name"], match["sha"].lower()
        if found.get(name, sha) != sha:
            raise UsageError(f"{source}:{number}: {name} has two different digests")
        found[name] = sha
    return found


def read_digest_file(path: Path | str) -> dict[str, str]:
    """parse_digest_file of a file on the controller; one-line UsageErrors for a file that cannot be read."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_DIGEST_FILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"artifact digest file {path}: {exc.strerror}") from None
    if len(data) > MAX_DIGEST_FILE_BYTES:
        raise UsageError(f"artifact digest file {path}: larger than {MAX_DIGEST_FILE_BYTES} bytes")
    try:
        return parse_digest_file(data.decode("utf-8"), str(path))
    except UnicodeDecodeError:
        raise UsageError(f"artifact digest file {path}: not UTF-8 text") from None


def pinned_digests(manifest: StackManifest, recorded: dict[str, str]) -> dict[str, str]:
    """Artifact key -> the sha256 its file must have: the manifest's, else the one recorded for its file name."""
    return {key: artifact.sha256 or recorded[artifact.file] for key, artifact in manifest.artifacts.items()
            if artifact.sha256 or artifact.file in recorded}


def digest_problems(manifest: StackManifest, recorded: dict[str, str], source: str) -> list[str]:
    """What keeps an installer from being checked: no digest anywhere, or a recorded one the manifest contradicts."""
    problems = []
    for artifact in manifest.artifacts.values():
        got = recorded.get(artifact.file)
        if artifact.sha256 is None and got is None:
            problems.append(f"no sha256 for {artifact.file}: the stack manifest has none and {source} records none "
                            "(download it from the vendor, then `dapo-ops stack artifacts DIR`)")
        elif artifact.sha256 is not None and got is not None and got != artifact.sha256:
            problems.append(f"{artifact.file}: {source} records sha256 {got}, the stack manifest pins "
                            f"{artifact.sha256}")
    return problems


def _stem(artifact: Artifact) -> tuple[str, str]:
    """What every release of this installer's name starts and ends with (the text before its version, its
    extension): a file that has both but is not the pinned name is another version or platform of it."""
    name = artifact.file
    stem = name[: name.index(artifact.version)] if artifact.version in name else name.rsplit(".", 1)[0]
    return stem.lower(), "." + name.rsplit(".", 1)[-1].lower()


def look_alike(manifest: StackManifest, name: str) -> Artifact | None:
    """The pinned installer that `name` is another version or platform of, if any (None for the pinned name)."""
    for artifact in manifest.artifacts.values():
        stem, extension = _stem(artifact)
        if name != artifact.file and name.lower().startswith(stem) and name.lower().endswith(extension):
            return artifact
    return None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Checked:
    """One pinned installer as found in the directory."""

    key: str
    file: str
    size: int | None = None        # None: not in the directory
    sha256: str | None = None
    problem: str | None = None     # why it cannot be recorded


def check_directory(manifest: StackManifest, directory: Path, on_file=None) -> tuple[list[Checked], list[str]]:
    """Every pinned installer of the manifest in `directory`, hashed, and every other version or platform of one
    (refused). `on_file(name, size)` is told before each file is hashed. Returns (the pinned ones, refusals)."""
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory")
    refusals = []
    for path in sorted(directory.iterdir()):
        other = look_alike(manifest, path.name)
        if other is not None:
            refusals.append(f"{path.name} is not the pinned {other.file} (another version or platform of the "
                            f"{other.key} installer: the stack pins {other.version})")
    checked = []
    for key, artifact in manifest.artifacts.items():
        path = directory / artifact.file
        if not path.is_file():
            checked.append(Checked(key, artifact.file, problem="missing"))
            continue
        size = path.stat().st_size
        if on_file is not None:
            on_file(artifact.file, size)
        try:
            sha = sha256_of(path)
        except OSError as exc:
            checked.append(Checked(key, artifact.file, size, problem=f"cannot be read: {exc.strerror}"))
            continue
        problem = (f"sha256 {sha}, but the stack manifest pins {artifact.sha256}: not the vendor's file"
                   if artifact.sha256 and sha != artifact.sha256 else None)
        checked.append(Checked(key, artifact.file, size, sha, problem))
    return checked, refusals


def bundle_name(repo: str, ref: str) -> str:
    """The file a source's git bundle is looked for under in the artifact source (variables.GIT_BUNDLES):
    `<repository name>-<tag>.bundle`, e.g. `verl-v1.2.3.bundle` for volcengine/verl at v1.2.3."""
    return f"{repo.rsplit('/', 1)[-1]}-{ref}.bundle"


def digest_lines(digests: dict[str, str]) -> str:
    """File name -> sha256 in sha256sum's format: `sha256sum -c` in the files' directory checks them against it."""
    return "".join(f"{sha}  {name}\n" for name, sha in digests.items())
