"""The simulated fleet's artifact mirror: installers, a PEP 503 package index and git repositories over HTTP.

Layout under the mirror root (served as-is):
    artifacts/<vendor file>          the pinned installers (stand-ins), their digest file and the sources as git
                                     bundles of their pinned tags (<repo>-<tag>.bundle, for dapo_git_bundles)
    simple/<project>/index.html      PEP 503 index -> files/<wheel>
    files/<wheel>                    the locked closure (real files, cached from the registry) and stand-in wheels
    stack-lock.txt                   the nodes' lock with the stand-ins' hashes (inventory: dapo_stack_lock)
    git/<name>.git                   bare repositories (smart HTTP, shallow clones work): vllm, vllm-ascend, verl
    conda/<subdir>/repodata.json     a conda channel with the pinned Python (for dapo_conda_channel)
    os-packages/                     a flat apt repository of the OS packages the nodes lack (dapo_sim/os_repo.py)
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dapo_sim.errors import SimError
from dapo_ops.manifest import StackManifest
from dapo_sim import artifacts, conda_channel, os_repo, repos, wheels
from dapo_sim.proc import port_open


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

    @property
    def lock(self) -> Path:
        """The nodes' lock with the stand-ins' hashes (the simulated inventory's dapo_stack_lock)."""
        return self.root / "stack-lock.txt"

    @property
    def os_packages(self) -> Path:
        """A flat apt repository of the stack's OS packages the nodes lack (for dapo_os_packages_dir)."""
        return self.root / "os-packages"


def prepare(root: Path, cache: Path, manifest: StackManifest, log: Path) -> MirrorLayout:
    """Build (or refresh) the mirror content; real wheels come from the cache, fetched on first use."""
    layout = MirrorLayout(root)
    artifacts.write_pinned(manifest, layout.artifacts)
    conda_channel.write_channel(root / "conda", manifest)
    real = wheels.fetch_locked_files(cache / f"locked-{os.uname().machine}", manifest, log)
    verl_wheel = wheels.fetch_verl_wheel(cache / "wheels", manifest, log)
    standins = wheels.standin_wheels(cache / "standin-wheels", manifest)
    if layout.files.exists():
        shutil.rmtree(layout.files)
    served = wheels.link_files(layout.files, real + standins)
    if layout.simple.exists():
        shutil.rmtree(layout.simple)
    wheels.write_index(layout.simple, served)
    lock_path, _ = wheels.source_lock(manifest)
    layout.lock.write_text(wheels.render_sim_lock(lock_path.read_text(), str(lock_path.name), standins))
    repos.build_repos(layout.git, manifest, verl_wheel, cache / "scratch")
    repos.write_bundles(layout.git, manifest, layout.artifacts)
    os_repo.build(layout.os_packages, cache / "os-packages", manifest)
    return layout


class MirrorHandler(http.server.SimpleHTTPRequestHandler):
    """Static files, plus git's smart HTTP protocol (through `git http-backend`) under /git/ so that shallow
    clones work as they do against a real git server."""

    git_root: Path = Path("/nonexistent")

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's signature
        sys.stderr.write("%s - %s\n" % (self.address_string(), format % args))

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.startswith("/git/"):
            self._git_backend()
        else:
            super().do_GET()

    def do_POST(self) -> None:  # noqa: N802
        if self.path.startswith("/git/"):
            self._git_backend()
        else:
            self.send_error(405)

    def _git_backend(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": str(self.git_root),
            "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path[len("/git"):], "QUERY_STRING": query,
            "REQUEST_METHOD": self.command, "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": self.client_address[0],
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        result = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=300)
        sep = b"\r\n\r\n" if b"\r\n\r\n" in result.stdout else b"\n\n"
        head, _, payload = result.stdout.partition(sep)
        status, headers = 200, []
        for line in head.decode(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key.strip(), value.strip()))
        if result.returncode != 0 and not head:
            self.send_error(500, "git http-backend failed")
            return
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def serve(root: Path, bind: str, port: int) -> None:
    handler_class = type("BoundMirrorHandler", (MirrorHandler,), {"git_root": root / "git"})
    handler = functools.partial(handler_class, directory=str(root))
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    with http.server.ThreadingHTTPServer((bind, port), handler) as server:
        server.serve_forever()


def start(root: Path, bind: str, port: int, log_file: Path, record: Callable[..., None]) -> int:
    """Serve the mirror from a detached process (this module's main), recorded as soon as it exists; return its PID
    once the port answers."""
    log = open(log_file, "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dapo_sim.mirror", "--root", str(root), "--bind", bind, "--port", str(port)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    log.close()
    record("process", "mirror", proc.pid)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if port_open(bind, port):
            return proc.pid
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise SimError(f"the artifact mirror did not start; see {log_file}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="serve the dapo-ops simulated mirror")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", required=True, type=int)
    args = parser.parse_args(argv)
    serve(args.root, args.bind, args.port)


if __name__ == "__main__":
    main()
