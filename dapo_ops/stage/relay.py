"""`dapo-ops stage`, on the nodes: a standard-library program that stage pushes to a private directory on each
node for one run and removes after it (python3 3.8 or later; the controller imports it too, for the frame format).

    relay.py hash             stdin: a JSON list of paths. stdout: one JSON line per path, {"path", "size",
                              "sha256"}, or {"path", "missing": true}, or {"path", "error"}.
    relay.py recv HOP.json    stdin: the frame stream. Writes the files addressed to this hop, passes every frame on
                              to the next hop (HOP.json's "next": the ssh command that reaches it), and reports.
    relay.py send             stdin: a JSON list of frame headers with "source" paths on this node. stdout: the
                              frame stream (a node that already has the files is the source).
    relay.py list MODEL_DIR   stdout: {"files": [...], "left_out": [...], "problems": [...]}: node_files' answer here.

A frame is one JSON header line {"target", "size", "sha256", "mode", "to": [hop names]} and then exactly `size`
bytes; {"end": true} ends the stream. A file is written under a hidden partial name in its directory, checked
against its sha256 and only then renamed to its name: a reader never sees part of a file under the final name, and
an interrupted copy leaves at most a partial file that the next run overwrites.

Every report line starts with EVENT_PREFIX; a hop passes its next hop's report lines on, so the controller reads the
whole chain's on the first hop's stdout.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

EVENT_PREFIX = "DAPO-STAGE "
CHUNK = 1 << 20
PROGRESS_EVERY = 0.5     # seconds between a hop's progress lines
PARTIAL_SUFFIX = ".dapo-partial"


def partial_name(target: str) -> str:
    """A hidden name of this writer's own beside the target (two relays writing one shared path never meet)."""
    head, tail = os.path.split(target)
    return os.path.join(head, f".{tail}.{os.getpid()}.{os.urandom(4).hex()}{PARTIAL_SUFFIX}")


# ------------------------------------------------------------------------------------------------ hash

def file_digest(path: str) -> dict:
    try:
        if not os.path.isfile(path):
            return {"path": path, "missing": True}
        digest = hashlib.sha256()
        size = 0
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(CHUNK), b""):
                digest.update(block)
                size += len(block)
        return {"path": path, "size": size, "sha256": digest.hexdigest()}
    except OSError as exc:
        return {"path": path, "error": exc.strerror or str(exc)}


def hash_paths(paths: list, out) -> None:
    """Every path's size and sha256, several files at once (hashlib lets go of the GIL on large blocks)."""
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        for answer in pool.map(file_digest, paths):
            out.write(json.dumps(answer) + "\n")
            out.flush()


# ------------------------------------------------------------------------------------------------ frames

def header(entry: dict) -> bytes:
    fields = {k: entry[k] for k in ("target", "size", "sha256", "mode", "to")}
    return (json.dumps(fields, sort_keys=True) + "\n").encode()


END = b'{"end": true}\n'


def write_frames(entries: list, write) -> None:
    """The frame stream of `entries` (each with a "source" path) through write(bytes). A source whose size is not
    the size its header claims (changed since it was hashed) raises OSError."""
    for entry in entries:
        write(header(entry))
        left = entry["size"]
        with open(entry["source"], "rb") as fh:
            while left:
                block = fh.read(min(CHUNK, left))
                if not block:
                    raise OSError(f"{entry['source']} shrank while it was sent: {left} bytes short")
                write(block)
                left -= len(block)
    write(END)


# ------------------------------------------------------------------------------------------------ recv

class Partial:
    """A file being received: written under a hidden name of its own in the target's directory (created
    exclusively: never another writer's file, nor a link planted there), hashed as it is written, and renamed over
    the target only by publish()."""

    def __init__(self, target: str):
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        self.target = target
        self.path = partial_name(target)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        self.file = os.fdopen(os.open(self.path, flags, 0o600), "wb")
        self.digest = hashlib.sha256()
        self.published = False

    def write(self, block: bytes) -> None:
        self.file.write(block)
        self.digest.update(block)

    def close(self, mode: int) -> str:
        """Flushed to disk, given its mode, closed; its sha256."""
        self.file.flush()
        os.fsync(self.file.fileno())
        os.fchmod(self.file.fileno(), mode)
        self.file.close()
        return self.digest.hexdigest()

    def publish(self) -> None:
        os.replace(self.path, self.target)
        self.published = True

    def discard(self) -> None:
        if self.published:
            return
        if not self.file.closed:
            self.file.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.published = True     # nothing left to do


class Reporter:
    def __init__(self, out):
        self.out = out
        self.lock = threading.Lock()

    def line(self, raw: bytes) -> None:
        with self.lock:
            self.out.write(raw)
            self.out.flush()

    def event(self, event: str, **fields) -> None:
        self.line((EVENT_PREFIX + json.dumps({"event": event, **fields}, sort_keys=True) + "\n").encode())


class Hop:
    """One node of the chain: writes what is addressed to it, passes everything on."""

    def __init__(self, config: dict, reporter: Reporter):
        self.name = config["name"]
        allowed = config.get("allowed")
        self.allowed = dict(allowed) if isinstance(allowed, dict) else None
        self.reporter = reporter
        self.next = None
        self.written = 0
        self.files = 0
        self.failed: list = []
        self.last_report = 0.0
        self.passing = None
        if config.get("next"):
            self.next = subprocess.Popen(config["next"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self.passing = threading.Thread(target=self.pass_reports, args=(self.next.stdout,), daemon=True)
            self.passing.start()

    def pass_reports(self, reports) -> None:
        for raw in reports:
            self.reporter.line(raw)

    def forward(self, data: bytes) -> None:
        if self.next is None:
            return
        try:
            self.next.stdin.write(data)
        except (BrokenPipeError, OSError):
            self.reporter.event("lost", node=self.name, why="the next node stopped taking the stream")
            self.next = None

    def progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_report >= PROGRESS_EVERY:
            self.last_report = now
            self.reporter.event("progress", node=self.name, bytes=self.written, files=self.files)

    def refusal(self, head: dict) -> str:
        """Why this hop will not write a frame addressed to it: only the files (and sha256) the controller listed in
        this hop's own hop.json are written, whatever the previous node sends."""
        if self.allowed is not None and self.allowed.get(head["target"]) != head["sha256"]:
            return "not a file this run stages on this node"
        return ""

    def take(self, head: dict, stream) -> bool:
        """One frame's bytes: written (when addressed here) and passed on. False when the stream ended early."""
        target = head["target"]
        writer = None
        if self.name in head["to"]:
            why = self.refusal(head)
            if not why:
                try:
                    writer = Partial(target)
                except OSError as exc:
                    why = f"cannot write it: {exc.strerror or exc}"
            if why:
                self.fail(target, why)
        left = head["size"]
        try:
            while left:
                block = stream.read(min(CHUNK, left))
                if not block:
                    return False
                left -= len(block)
                self.forward(block)
                if writer is not None:
                    try:
                        writer.write(block)
                    except OSError as exc:
                        writer.discard()
                        writer = None
                        self.fail(target, f"writing it failed: {exc.strerror or exc}")
                        continue
                    self.written += len(block)
                    self.progress()
            if writer is not None:
                self.finish(writer, head)
            return True
        finally:
            if writer is not None:
                writer.discard()

    def fail(self, target: str, why: str) -> None:
        self.failed.append(target)
        self.reporter.event("file", node=self.name, target=target, ok=False, why=why)

    def finish(self, writer: "Partial", head: dict) -> None:
        try:
            sha256 = writer.close(head["mode"])
            if sha256 != head["sha256"]:
                self.fail(head["target"], f"arrived with sha256 {sha256}, expected {head['sha256']}")
                return
            writer.publish()
        except OSError as exc:
            self.fail(head["target"], f"could not be put in place: {exc.strerror or exc}")
            return
        self.files += 1
        self.reporter.event("file", node=self.name, target=head["target"], ok=True)

    def run(self, stream) -> int:
        ended = False
        while True:
            line = stream.readline()
            if not line:
                break
            self.forward(line)
            head = json.loads(line)
            if head.get("end"):
                ended = True
                break
            if not self.take(head, stream):
                break
        self.progress(force=True)
        if self.next is not None:
            try:
                self.next.stdin.close()
            except OSError:
                pass
            code = self.next.wait()
            if code != 0:
                self.reporter.event("lost", node=self.name, why=f"the next node's relay ended with exit {code}")
        if self.passing is not None:
            self.passing.join(30)
        self.reporter.event("done", node=self.name, files=self.files, bytes=self.written, complete=ended,
                            failed=self.failed)
        return 0 if ended and not self.failed else 1


def list_model(model_dir: str) -> dict:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import node_files  # pushed beside this file

    try:
        files, left_out = node_files.model_file_names(model_dir)
    except (OSError, ValueError) as exc:
        return {"files": [], "left_out": [], "problems": [f"{model_dir}: {exc}"]}
    return {"files": files, "left_out": left_out, "problems": node_files.model_problems(model_dir)}


def main(argv: list) -> int:
    os.umask(0o022)
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "hash":
        hash_paths(json.load(sys.stdin), sys.stdout)
        return 0
    if mode == "send":
        write_frames(json.load(sys.stdin), sys.stdout.buffer.write)
        sys.stdout.buffer.flush()
        return 0
    if mode == "list" and len(argv) == 3:
        print(json.dumps(list_model(argv[2])))
        return 0
    if mode == "recv" and len(argv) == 3:
        with open(argv[2]) as fh:
            config = json.load(fh)
        return Hop(config, Reporter(sys.stdout.buffer)).run(sys.stdin.buffer)
    sys.stderr.write("usage: relay.py hash | send | list MODEL_DIR | recv HOP.json\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
