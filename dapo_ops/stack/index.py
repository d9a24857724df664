"""A PEP 503 "simple" package index as static files: simple/index.html lists the projects, and
simple/<project>/index.html links each distribution file as `<files_url>/<file>#sha256=<digest>` (PEP 503: the
URL fragment names the hash, which pip checks). Served over HTTP (`python3 -m http.server` in the directory above
simple/) or read directly by pip as a file:// URL.

`index_pages` is pure (file names and digests in, page texts out); `write_index` hashes the files and writes the
pages. Used by `dapo-ops stack wheelhouse` and by the simulated fleet's mirror (dapo_sim.wheels).
"""

from __future__ import annotations

import hashlib
import html
import os
import tempfile
from pathlib import Path

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename
from packaging.utils import parse_wheel_filename

SDIST_SUFFIXES = (".tar.gz", ".zip")


def project_of(filename: str) -> str | None:
    """The PEP 503 normalised project a wheel or sdist file belongs to; None if the name is neither."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[0])
        if filename.endswith(SDIST_SUFFIXES):
            return str(parse_sdist_filename(filename)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        pass
    return None


def index_pages(digests: dict[str, str], files_url: str = "../../files") -> dict[str, str]:
    """Page path (relative to simple/) -> HTML, for distribution files given as file name -> sha256 hex digest.
    Files whose name is not a wheel or an sdist are left out."""
    by_project: dict[str, list[str]] = {}
    for name in digests:
        project = project_of(name)
        if project is not None:
            by_project.setdefault(canonicalize_name(project), []).append(name)
    pages: dict[str, str] = {}
    root_links = []
    for project in sorted(by_project):
        root_links.append(f'<a href="{project}/">{project}</a>')
        links = [f'<a href="{files_url}/{html.escape(name)}#sha256={digests[name]}">{html.escape(name)}</a>'
                 for name in sorted(by_project[project])]
        pages[f"{project}/index.html"] = ("<!DOCTYPE html>\n<html><body>\n" + "<br/>\n".join(links)
                                          + "\n</body></html>\n")
    pages["index.html"] = "<!DOCTYPE html>\n<html><body>\n" + "\n".join(root_links) + "\n</body></html>\n"
    return pages


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".index-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_index(simple: Path, files: list[Path], files_url: str = "../../files",
                digests: dict[str, str] | None = None, prune: bool = False) -> None:
    """Write the simple index for `files` under `simple` (each page replaced atomically). `digests` (file name ->
    sha256) saves hashing files whose digest is already known. With `prune`, project pages no longer backed by a
    file are removed, so the index never links a file that is gone."""
    known = dict(digests or {})
    pages = index_pages({f.name: known.get(f.name) or sha256_of(f) for f in files}, files_url)
    simple.mkdir(parents=True, exist_ok=True)
    for relative, text in pages.items():
        _write_atomic(simple / relative, text)
    for stale in simple.glob("*/index.html") if prune else ():
        if f"{stale.parent.name}/index.html" not in pages:
            stale.unlink()
            try:
                stale.parent.rmdir()
            except OSError:
                pass
