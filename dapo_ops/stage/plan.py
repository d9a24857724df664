"""What `dapo-ops stage` sends where (pure): the source's files with their sha256, each node's copies as its relay
hashed them, and from the two the files each node lacks. A file is in place only when its sha256 is the source's;
size and mtime are never trusted."""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field

from dapo_ops.errors import ParseError, UsageError


@dataclass(frozen=True)
class SourceFile:
    source: str      # where it is read: a controller path, or a path on the source node
    target: str      # where the job reads it on every node
    size: int
    sha256: str
    what: str        # "model" or the data field (data.train_files, ...)
    mode: int = 0o644


@dataclass(frozen=True)
class Digest:
    size: int | None = None      # None: missing
    sha256: str | None = None
    error: str | None = None     # the file is there but could not be read


def parse_hashes(output: str) -> dict[str, Digest]:
    """relay.py hash's output -> path -> Digest."""
    digests: dict[str, Digest] = {}
    for number, line in enumerate(output.splitlines(), 1):
        if not line.strip():
            continue
        try:
            answer = json.loads(line)
            path = answer["path"]
            if answer.get("missing"):
                digests[path] = Digest()
            elif "error" in answer:
                digests[path] = Digest(error=str(answer["error"]))
            else:
                digests[path] = Digest(int(answer["size"]), str(answer["sha256"]))
        except (ValueError, KeyError, TypeError):
            raise ParseError("relay.py hash", "not a digest line", number, line) from None
    return digests


def under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root if root.endswith("/") else root + "/")


@dataclass(frozen=True)
class Placement:
    """Which nodes hold their own copy of each file: every node, but one for a file under a directory all nodes
    share (written once, seen by all)."""
    nodes: list[str]
    shared_roots: tuple[str, ...] = ()

    def holders(self, target: str) -> list[str]:
        if any(under(target, root) for root in self.shared_roots):
            return self.nodes[:1]
        return list(self.nodes)

    def targets(self, files: list[SourceFile], node: str) -> list[SourceFile]:
        return [f for f in files if node in self.holders(f.target)]


@dataclass
class StagePlan:
    files: list[SourceFile]
    placement: Placement
    needs: dict[str, list[SourceFile]] = field(default_factory=dict)   # node -> files it lacks
    unreadable: dict[str, list[str]] = field(default_factory=dict)     # node -> "path: why" it could not hash

    @property
    def to_send(self) -> list[SourceFile]:
        wanted = {f.target for files in self.needs.values() for f in files}
        return [f for f in self.files if f.target in wanted]

    @property
    def receivers(self) -> list[str]:
        return [n for n in self.placement.nodes if self.needs.get(n)]

    def bytes_for(self, node: str) -> int:
        return sum(f.size for f in self.needs.get(node, []))

    def frames(self) -> list[dict]:
        """The frame headers to send, in the source's order, each addressed to the nodes that lack the file."""
        return [{"source": f.source, "target": f.target, "size": f.size, "sha256": f.sha256, "mode": f.mode,
                 "to": [n for n in self.placement.nodes if f in self.needs.get(n, [])]} for f in self.to_send]


def plan(files: list[SourceFile], placement: Placement, listings: dict[str, dict[str, Digest]]) -> StagePlan:
    """Each node's needs from its listing (a file missing from the listing is needed)."""
    result = StagePlan(files, placement)
    for node in placement.nodes:
        have = listings.get(node, {})
        mine = placement.targets(files, node)
        result.needs[node] = [f for f in mine if have.get(f.target, Digest()).sha256 != f.sha256]
        bad = [f"{f.target}: {have[f.target].error}" for f in mine if f.target in have and have[f.target].error]
        if bad:
            result.unreadable[node] = bad
    return result


def check_targets(files: list[SourceFile]) -> None:
    """UsageError when two sources land on one target, or a target is not an absolute, normal path."""
    seen: dict[str, str] = {}
    for f in files:
        if not f.target.startswith("/") or posixpath.normpath(f.target) != f.target or f.target.startswith("//"):
            raise UsageError(f"{f.target} ({f.what}): the job's paths must be absolute and normal (no '..', no '//')")
        if f.target in seen and seen[f.target] != f.source:
            raise UsageError(f"{f.target} is named twice ({seen[f.target]} and {f.source}): one file per path")
        seen[f.target] = f.source


def target_dirs(files: list[SourceFile]) -> list[str]:
    return sorted({posixpath.dirname(f.target) for f in files})


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
