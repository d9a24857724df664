"""What the launcher does on the nodes, over SSH: the cluster lock, pushing a run's files, Ray up and down,
the job's submission and its status. Every remote call has its own deadline."""

from __future__ import annotations

import io
import json
import re
import shlex
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dapo_ops.errors import DapoError
from dapo_ops.fleet.ssh import HostSpec, connect, run_on

LOCK_FILE = "/var/lib/dapo-ops/cluster.lock"
RUNS_ROOT = "/var/lib/dapo-ops/runs"

PROBE = """import json, ray
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
alive = [n for n in ray.nodes() if n["Alive"]]
print("DAPO-PROBE " + json.dumps({"alive": len(alive), "npu": ray.cluster_resources().get("NPU", 0),
                                  "hosts": sorted(n["NodeManagerAddress"] for n in alive)}))
"""


class LaunchError(DapoError):
    """A launch step failed; the message names the step and the node."""


@dataclass(frozen=True)
class Lock:
    run_id: str
    controller: str
    pid: int
    created: str

    def describe(self) -> str:
        return f"run {self.run_id} (launched from {self.controller}, pid {self.pid}, at {self.created})"


def _check(result, step: str, host: str) -> str:
    if result.error:
        raise LaunchError(f"{step} on {host}: {result.error}")
    if result.exit_code != 0:
        tail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-3:]
        raise LaunchError(f"{step} on {host} failed (exit {result.exit_code}): {' | '.join(tail)}")
    return result.stdout


def acquire_lock(head: HostSpec, run_id: str) -> Lock | None:
    """Create the lock on the head atomically; returns None on success, the holder's Lock otherwise."""
    lock = Lock(run_id, socket.gethostname(), __import__("os").getpid(),
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    payload = shlex.quote(json.dumps(lock.__dict__))
    result = run_on(head, f"mkdir -p {shlex.quote(LOCK_FILE.rsplit('/', 1)[0])} && "
                          f"(set -C; printf '%s\\n' {payload} > {LOCK_FILE}) 2>/dev/null || "
                          f"{{ cat {LOCK_FILE}; exit 3; }}", timeout=30)
    if result.error:
        raise LaunchError(f"cluster lock on {head.name}: {result.error}")
    if result.exit_code == 0:
        return None
    try:
        return Lock(**json.loads(result.stdout.strip().splitlines()[-1]))
    except (ValueError, TypeError, IndexError):
        return Lock("unknown", "unknown", 0, "unknown")


def release_lock(head: HostSpec, run_id: str) -> None:
    """Remove the lock if this run holds it (never someone else's)."""
    run_on(head, f"grep -q {shlex.quote(json.dumps(run_id))} {LOCK_FILE} 2>/dev/null && rm -f {LOCK_FILE}; true",
           timeout=30)


def break_lock(head: HostSpec) -> None:
    _check(run_on(head, f"rm -f {LOCK_FILE}", timeout=30), "breaking the cluster lock", head.name)


def push_files(host: HostSpec, node_dir: str, files: dict[str, str], secrets: dict[str, str] | None = None) -> None:
    """Upload a node's rendered files (scripts 0755, the rest 0644) and, mode 0600, its secrets."""
    conn = connect(host)
    try:
        conn.run(f"umask 022 && mkdir -p {shlex.quote(node_dir)}", hide=True, timeout=30)
        for name, text in sorted(files.items()):
            path = f"{node_dir}/{name}"
            conn.put(io.BytesIO(text.encode()), remote=path)
            mode = "755" if name.endswith(".sh") and name != "env.sh" else "644"
            conn.run(f"chmod {mode} {shlex.quote(path)}", hide=True, timeout=30)
        if secrets:
            path = f"{node_dir}/secrets.env"
            conn.run(f"umask 077 && : > {shlex.quote(path)} && chmod 600 {shlex.quote(path)}", hide=True, timeout=30)
            body = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(secrets.items()))
            conn.put(io.BytesIO(body.encode()), remote=path)
    except Exception as exc:  # paramiko/invoke errors: name the node
        raise LaunchError(f"pushing the run's files to {host.name}: {exc}") from None
    finally:
        conn.close()


def ray_stop(hosts: list[HostSpec], ray: dict[str, str], timeout: float = 60) -> dict[str, str | None]:
    """`ray stop --force` on every node in parallel; returns host -> error (None when stopped)."""
    def stop(host):
        result = run_on(host, f"{shlex.quote(ray[host.name])} stop --force >/dev/null 2>&1; true", timeout=timeout)
        return host.name, result.error
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        return dict(pool.map(stop, hosts))


def start_head(head: HostSpec, node_dir: str, timeout: float) -> None:
    _check(run_on(head, f"timeout {int(timeout)} bash {shlex.quote(node_dir + '/ray-start.sh')}", timeout=timeout + 15),
           "starting the Ray head", head.name)


def start_workers(workers: list[HostSpec], node_dir: str, timeout: float, attempts: int = 3) -> None:
    def start(host):
        last = None
        for _ in range(attempts):
            result = run_on(host, f"bash {shlex.quote(node_dir + '/ray-start.sh')}", timeout=timeout + 15)
            if result.error is None and result.exit_code == 0:
                return None
            last = result
            time.sleep(2)
        try:
            _check(last, "starting the Ray worker", host.name)
        except LaunchError as exc:
            return str(exc)
        return None
    with ThreadPoolExecutor(max_workers=max(1, len(workers))) as pool:
        errors = [e for e in pool.map(start, workers) if e]
    if errors:
        raise LaunchError("; ".join(errors))


def probe(head: HostSpec, node_dir: str, python: str, timeout: float = 60) -> dict:
    command = (f"source {shlex.quote(node_dir + '/env.sh')} && {shlex.quote(python)} -c {shlex.quote(PROBE)}")
    out = _check(run_on(head, f"bash -c {shlex.quote(command)}", timeout=timeout), "asking Ray for its nodes", head.name)
    for line in out.splitlines():
        if line.startswith("DAPO-PROBE "):
            return json.loads(line[len("DAPO-PROBE "):])
    raise LaunchError(f"asking Ray for its nodes on {head.name}: no answer")


def wait_for_cluster(head: HostSpec, node_dir: str, python: str, nodes: int, npus: int, deadline: float) -> dict:
    """Poll until Ray reports `nodes` alive nodes and `nodes * npus` NPU, or the deadline passes."""
    last: dict = {}
    while True:
        try:
            last = probe(head, node_dir, python)
        except LaunchError as exc:
            last = {"error": str(exc)}
        if last.get("alive") == nodes and last.get("npu") == nodes * npus:
            return last
        if time.monotonic() > deadline:
            raise LaunchError(f"Ray reports {last.get('alive', '?')} node(s) and {last.get('npu', '?')} NPU, "
                              f"expected {nodes} and {nodes * npus}: " + json.dumps(last))
        time.sleep(2)


class _Lines(io.TextIOBase):
    """A write-only stream that hands every complete line to a callback (Fabric's out_stream)."""

    def __init__(self, on_line):
        self.on_line, self.partial = on_line, ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.partial += text
        *lines, self.partial = self.partial.split("\n")
        for line in lines:
            self.on_line(line)
        return len(text)


def rehearse(head: HostSpec, node_dir: str, python: str, timeout: float, on_line) -> tuple[int | None, str]:
    """Run the rehearsal driver on the head, streaming its stdout lines to on_line; (exit code, stderr tail).
    The exit code is None when the head could not be reached or the deadline passed."""
    command = (f"cd {shlex.quote(node_dir)} && source ./env.sh && exec timeout {int(timeout)} "
               f"{shlex.quote(python)} rehearsal_driver.py rehearsal.json")
    try:
        conn = connect(head)
    except DapoError as exc:
        return None, str(exc)
    stderr = io.StringIO()
    try:
        result = conn.run(f"bash -c {shlex.quote(command)}", out_stream=_Lines(on_line), err_stream=stderr, warn=True,
                          timeout=timeout + 15, in_stream=False)
        return result.exited, stderr.getvalue()[-2000:]
    except Exception as exc:  # CommandTimedOut, a dropped connection: the caller tears the cluster down
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def submit(head: HostSpec, node_dir: str, submission_id: str, timeout: float = 120) -> str:
    out = _check(run_on(head, f"DAPO_SUBMISSION_ID={shlex.quote(submission_id)} bash "
                              f"{shlex.quote(node_dir + '/submit.sh')}", timeout=timeout),
                 "submitting the job", head.name)
    return out


# `ray job status` says "Status for job 'ID': RUNNING" while the job runs, "Job 'ID' succeeded" once it ended
_STATUS = re.compile(r"Status for job '[^']+': (\w+)|Job '[^']+' (succeeded|failed|was stopped|stopped)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def job_status(head: HostSpec, ray: str, dashboard: str, submission_id: str, timeout: float = 60) -> str:
    out = _check(run_on(head, f"{shlex.quote(ray)} job status --address={shlex.quote(dashboard)} "
                              f"{shlex.quote(submission_id)}", timeout=timeout), "asking Ray for the job", head.name)
    match = _STATUS.search(_ANSI.sub("", out))
    if not match:
        raise LaunchError(f"Ray's job status on {head.name} was not understood: {out.strip()[-200:]}")
    if match.group(1):
        return match.group(1)
    return {"succeeded": "SUCCEEDED", "failed": "FAILED"}.get(match.group(2), "STOPPED")


def job_stop(head: HostSpec, ray: str, dashboard: str, submission_id: str, timeout: float = 60) -> None:
    run_on(head, f"{shlex.quote(ray)} job stop --address={shlex.quote(dashboard)} {shlex.quote(submission_id)} "
                 ">/dev/null 2>&1; true", timeout=timeout)


def job_logs(head: HostSpec, ray: str, dashboard: str, submission_id: str, follow: bool, stream) -> None:
    conn = connect(head)
    try:
        conn.run(f"{shlex.quote(ray)} job logs --address={shlex.quote(dashboard)} "
                 f"{'--follow ' if follow else ''}{shlex.quote(submission_id)}", out_stream=stream, err_stream=stream,
                 warn=True, timeout=None if follow else 120, in_stream=False)
    finally:
        conn.close()
