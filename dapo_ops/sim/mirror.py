"""The simulated fleet's artifact mirror: installers, a PEP 503 package index and git repositories over HTTP.

Layout under the mirror root (served as-is):
    artifacts/<vendor file>          the pinned installers (stand-ins, digests as in stack/manifest.yml)
    simple/<project>/index.html      PEP 503 index -> files/<wheel>
    files/<wheel>                    real wheels (cached from the registry) and stand-in wheels
    git/<name>.git                   bare repositories (dumb HTTP): vllm, vllm-ascend, verl
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from dapo_ops.errors import SimError
from dapo_ops.manifest import StackManifest
from dapo_ops.sim import artifacts, repos, wheels


@dataclass(frozen=True)
class MirrorLayout:
    root: Path

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def simple(self) -> Path:
        return self.root / "simple"

    @property
    def files(self) -> Path:
        return self.root / "files"

    @property
    def git(self) -> Path:
        return self.root / "git"


def prepare(root: Path, cache: Path, manifest: StackManifest, log: Path) -> MirrorLayout:
    """Build (or refresh) the mirror content; real wheels come from the cache, fetched on first use."""
    layout = MirrorLayout(root)
    artifacts.write_pinned(manifest, layout.artifacts)
    real = wheels.fetch_real_wheels(cache / "wheels", manifest, log)
    standins = wheels.standin_wheels(cache / "standin-wheels", manifest)
    if layout.files.exists():
        shutil.rmtree(layout.files)
    served = wheels.link_files(layout.files, real + standins)
    if layout.simple.exists():
        shutil.rmtree(layout.simple)
    wheels.write_index(layout.simple, served)
    verl_wheel = next((w for w in real if w.name.startswith(f"verl-{manifest.source('verl').version}-")), None)
    if verl_wheel is None:
        raise SimError("the verl wheel is missing from the mirror cache")
    repos.build_repos(layout.git, manifest, verl_wheel, cache / "scratch")
    return layout


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's signature
        sys.stderr.write("%s - %s\n" % (self.address_string(), format % args))


def serve(root: Path, bind: str, port: int) -> None:
    handler = functools.partial(QuietHandler, directory=str(root))
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    with http.server.ThreadingHTTPServer((bind, port), handler) as server:
        server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="serve the dapo-ops simulated mirror")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", required=True, type=int)
    args = parser.parse_args(argv)
    serve(args.root, args.bind, args.port)


if __name__ == "__main__":
    main()
