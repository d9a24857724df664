"""Files the controller writes (run records, rendered files, audit bundles): modes set explicitly, so the result
is the same whatever the caller's umask (a umask of 077 would hide a bundle from its reader, 000 would make
it writable by all)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

FILE_MODE = 0o644
DIR_MODE = 0o755


def make_dirs(path: Path, mode: int = DIR_MODE) -> Path:
    """mkdir -p, each directory it creates given `mode` (existing ones are left as they are)."""
    missing = []
    current = Path(path)
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        os.chmod(directory, mode)
    return Path(path)


def write_text(path: Path, text: str, mode: int = FILE_MODE) -> None:
    """Write `text` to `path` (its directories made as by make_dirs) and give it `mode`."""
    make_dirs(Path(path).parent)
    Path(path).write_text(text)
    os.chmod(path, mode)


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write then rename, so a textfile collector never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
