"""Where `dapo-ops stage` reads the job's files: a controller directory, or `NODE:PATH` on an inventory node that
already has them. The model directory's files are node_files' list (the same list the launch rehearsal checks on
every node); the data files are the job's data paths, found in --data-from by their file names."""

from __future__ import annotations

import os
import posixpath
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dapo_ops.errors import UsageError
from dapo_ops.job import node_files
from dapo_ops.stage import relay
from dapo_ops.stage.plan import SourceFile


@dataclass(frozen=True)
class Source:
    node: str | None     # an inventory host name, or None: the controller
    path: str

    def __str__(self) -> str:
        return f"{self.node}:{self.path}" if self.node else self.path


def parse_source(text: str, option: str, host_names: list[str]) -> Source:
    """NODE:PATH when NODE is an inventory host and PATH is absolute; otherwise a controller path."""
    name, sep, path = text.partition(":")
    if sep and name in host_names:
        if not path.startswith("/"):
            raise UsageError(f"{option} {text}: the path on {name} must be absolute")
        return Source(name, posixpath.normpath(path))
    if sep and name and not os.path.exists(text) and path.startswith("/"):
        raise UsageError(f"{option} {text}: {name} is not a host of the inventory (known: {', '.join(host_names)})")
    return Source(None, os.path.abspath(text))


def model_targets(model_src: str, target_dir: str, names: list[str]) -> list[tuple[str, str]]:
    return [(posixpath.join(model_src, n), posixpath.join(target_dir.rstrip("/"), n)) for n in names]


def data_targets(paths: list[tuple[str, str]], data_src: Source | None) -> list[tuple[str, str, str]]:
    """(source path, target path, field) per data file: the job's own path, or its file name in --data-from."""
    seen: dict[str, tuple[str, str, str]] = {}
    names = {posixpath.basename(t) for _, t in paths}
    if data_src and len(names) < len({t for _, t in paths}):
        raise UsageError(f"--data-from {data_src}: the job's data files are found there by file name, and two of them "
                         "share one; stage them from their own paths instead")
    for field, target in paths:
        source = posixpath.join(data_src.path, posixpath.basename(target)) if data_src else target
        seen.setdefault(target, (source, target, field))
    return list(seen.values())


def local_model_names(model_src: str) -> tuple[list[str], list[str]]:
    """The model directory's files to stage and the ones the job does not read (left out), from one listing;
    UsageError when the job could not run from it."""
    if not os.path.isdir(model_src):
        raise UsageError(f"{model_src}: no model directory there (pass --model-from DIR or NODE:DIR)")
    try:
        names, left_out = node_files.model_file_names(model_src)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{model_src}: {exc}; nothing was copied") from None
    problems = node_files.model_problems(model_src)
    if problems:
        raise UsageError(model_refusal(problems))
    return names, left_out


def model_refusal(problems: list[str]) -> str:
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"the source's model directory is not one the job can load: {problems[0]}{more}; nothing was copied"


def hash_local(paths: list[str]) -> dict[str, dict]:
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        return dict(zip(paths, pool.map(relay.file_digest, paths)))


def source_files(pairs: list[tuple[str, str, str]], digests: dict[str, dict]) -> list[SourceFile]:
    """SourceFiles from (source, target, what) and the source's digests; UsageError for a missing or unreadable
    source file."""
    missing = [f"{source} ({what})" for source, _, what in pairs if digests.get(source, {}).get("missing")]
    unread = [f"{source}: {digests[source]['error']}" for source, _, _ in pairs if "error" in digests.get(source, {})]
    if missing or unread:
        problems = ([f"not at the source: {', '.join(missing)}"] if missing else []) + unread
        raise UsageError("; ".join(problems) + "; nothing was copied")
    return [SourceFile(source, target, int(digests[source]["size"]), str(digests[source]["sha256"]), what)
            for source, target, what in pairs]
