"""What the launcher does on the nodes, over SSH (the run lock is launch/locks.py): pushing a run's files, Ray up and down,
the job's submission and its status. Every remote call has its own deadline."""

from __future__ import annotations

import io
import json
import re
import shlex
import threading
import time
from urllib.parse import urlsplit

from dapo_ops.errors import DapoError
from dapo_ops.fleet.ssh import COMMAND, Failure, HostSpec, QUICK, TRANSFER, connect, fan_out, run, run_on
from dapo_ops.fleet.transfer import write_file
from dapo_ops.job.render import RAY_PROCESS_PATTERN, RAY_RUNNING, RUNS_ROOT, file_mode, node_dir  # noqa: F401
from dapo_ops.launch.teardown import (DROP_RUN_TABLES, RAY_SURVIVED_EXIT, leave_command, ray_stop,  # noqa: F401
                                      stopped)
from dapo_ops.ray_listeners import dashboard_guard

# Ray's State API (what `ray list nodes` reads), asked through the dashboard on the head: a plain HTTP GET, so the
# probe costs a fraction of a second where `import ray` would cost two.
PROBE = """import json, sys, urllib.request
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a site's http_proxy
with open(sys.argv[2]) as token_file:  # Ray's token authentication: the run's token, read from its 0600 file
    token = token_file.read().strip()
request = urllib.request.Request(sys.argv[1] + "/api/v0/nodes?limit=10000&detail=1",
                                 headers={"Authorization": "Bearer " + token})
with direct.open(request, timeout=10) as response:
    nodes = json.load(response)["data"]["result"]["result"]
alive = [n for n in nodes if n["state"] == "ALIVE"]
print("DAPO-PROBE " + json.dumps({"alive": len(alive), "npu": sum(n["resources_total"].get("NPU", 0) for n in alive),
                                  "hosts": sorted(n["node_ip"] for n in alive),
                                  "npu_by_host": {n["node_ip"]: n["resources_total"].get("NPU", 0) for n in alive}}))
"""
# Once every node is in, Ray's count of a node's NPU does not change by waiting: a wrong one fails the wait after
# this long (a node's resources come with its registration; the pause only rides out a probe racing it).
SETTLED_SECONDS = 5


class LaunchError(DapoError):
    """A launch step failed; the message names the step and the node."""


def push_files(host: HostSpec, node_dir: str, files: dict[str, str], private: dict[str, str] | None = None) -> None:
    """Upload a node's rendered files (scripts 0755, the rest 0644) and its private ones (the Ray token, the job's
    netrc), each created 0600 before a byte is written."""
    conn = connect(host)
    try:
        run(conn, host, f"umask 022 && mkdir -p {shlex.quote(node_dir)}", QUICK).raise_for("creating the run directory",
                                                                                      LaunchError)
        for name, text in sorted(files.items()):
            write_file(conn, host, f"{node_dir}/{name}", text.encode(), file_mode(name), QUICK)
        for name, text in sorted((private or {}).items()):
            write_file(conn, host, f"{node_dir}/{name}", text.encode(), 0o600, QUICK)
    except LaunchError:
        raise
    except Exception as exc:  # paramiko/invoke errors: name the node
        raise LaunchError(f"pushing the run's files to {host.name}: {exc}") from None
    finally:
        conn.close()


def push_all(hosts: list[HostSpec], files: dict[str, str], node_dir: str, private: dict[str, str],
             private_by_node: dict[str, dict[str, str]] | None = None) -> None:
    """Every node's files in parallel (`files` keyed nodes/<name>/..., each node gets only its own), the private
    ones to every node, and each node's own private ones (its TLS key)."""
    def push(host: HostSpec) -> str | None:
        prefix = f"nodes/{host.name}/"
        try:
            push_files(host, node_dir, {rel[len(prefix):]: text for rel, text in files.items()
                                        if rel.startswith(prefix)},
                       {**private, **(private_by_node or {}).get(host.name, {})})
        except DapoError as exc:
            return str(exc)
        return None

    errors = [e for e in fan_out(hosts, push).results.values() if e]
    if errors:
        raise LaunchError("; ".join(errors))


def ray_client(ray: str, token_file: str, dashboard: str) -> str:
    """The `ray` CLI with the run's token (Ray's token authentication): the file's path, never the token; after
    the head checked that root's Ray dashboard, and nobody else, holds the dashboard's port (ray_listeners.py)."""
    return (f"{dashboard_guard(urlsplit(dashboard).port or 8265)}; "
            f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={shlex.quote(token_file)} {shlex.quote(ray)}")


def start_head(head: HostSpec, node_dir: str, timeout: float) -> None:
    result = run_on(head, f"timeout {int(timeout)} bash {shlex.quote(node_dir + '/ray-start.sh')}",
                    timeout=timeout + 15)
    result.raise_for("starting the Ray head", LaunchError)


def start_worker(host: HostSpec, node_dir: str, attempt_timeout: float, deadline: float, cancelled: threading.Event,
                 attempts: int = 3) -> str | None:
    """Run the worker's ray-start.sh (its wait for the head and its `ray start` bounded to the attempt's time);
    returns the error, or None once the worker joined. A refused connection or a start that failed is retried;
    an attempt that timed out is not (its script may still be running on the node)."""
    last = None
    for attempt in range(attempts):
        remaining = min(deadline - time.monotonic(), attempt_timeout)
        if remaining < 15 or cancelled.is_set():
            break
        last = run_on(host, f"DAPO_START_TIMEOUT={int(remaining) - 5} bash {shlex.quote(node_dir + '/ray-start.sh')}",
                      timeout=remaining)
        if last.error is None and last.exit_code == 0:
            return None
        if last.failure is Failure.TIMED_OUT:
            break
        if attempt + 1 < attempts:
            time.sleep(2)
    if last is None:
        return f"starting the Ray worker on {host.name}: no time left before the deadline"
    try:
        last.raise_for("starting the Ray worker", LaunchError)
    except LaunchError as exc:
        return str(exc)
    return None


def start_cluster(head: HostSpec, workers: list[HostSpec], node_dir: str, head_timeout: float,
                  worker_timeout: float) -> None:
    """Start the head and, at the same time, the workers: their ray-start.sh waits (bounded) for the head's GCS
    port before `ray start`, so the workers join as soon as the head can take them. The workers run in daemon
    threads: a failed head fails the step at once, and no worker starts another attempt after that. The whole step
    has head_timeout; one worker attempt (the wait for the head, then `ray start`) has worker_timeout."""
    deadline = time.monotonic() + head_timeout
    cancelled = threading.Event()

    def start(host: HostSpec) -> str | None:
        if host is not head:
            return start_worker(host, node_dir, worker_timeout, deadline, cancelled)
        try:
            start_head(head, node_dir, head_timeout)
        except BaseException:
            cancelled.set()
            raise
        return None

    try:
        started = fan_out([head, *workers], start, deadline=deadline + 15).results
    finally:
        cancelled.set()
    if head.name not in started:
        raise LaunchError(f"starting the Ray head on {head.name}: no answer before the deadline")
    failed = [started.get(w.name, f"starting the Ray worker on {w.name}: no answer before the deadline")
              for w in workers]
    failed = [e for e in failed if e]
    if failed:
        raise LaunchError("; ".join(failed))


def probe(head: HostSpec, python: str, dashboard: str, token_file: str, timeout: float = QUICK) -> dict:
    result = run_on(head, f"{dashboard_guard(urlsplit(dashboard).port or 8265)}; "
                          f"{shlex.quote(python)} -c {shlex.quote(PROBE)} {shlex.quote(dashboard)} "
                          f"{shlex.quote(token_file)}", timeout=timeout)
    out = result.raise_for("asking Ray for its nodes", LaunchError)
    for line in out.splitlines():
        if line.startswith("DAPO-PROBE "):
            return json.loads(line[len("DAPO-PROBE "):])
    raise LaunchError(f"asking Ray for its nodes on {head.name}: no answer")


def npu_mismatch(seen: dict, addresses: dict[str, str], npus: int) -> list[str]:
    """The nodes Ray counts another number of NPU on than the run needs (pure), as "node2 (10.0.0.2): 8"."""
    by_ip = seen.get("npu_by_host") or {}
    return [f"{name} ({ip}): {by_ip[ip]:.0f}" for name, ip in addresses.items() if ip in by_ip and by_ip[ip] != npus]


def wait_for_cluster(head: HostSpec, python: str, dashboard: str, token_file: str, addresses: dict[str, str],
                     npus: int, deadline: float) -> dict:
    """Poll until Ray reports every node of `addresses` (node -> Ray address) alive with `npus` NPU each; fail at
    the deadline, or at once (after SETTLED_SECONDS) when every node is in but some count is wrong."""
    nodes, last, all_in_since = len(addresses), {}, None
    while True:
        try:
            last = probe(head, python, dashboard, token_file)
        except LaunchError as exc:
            last = {"error": str(exc)}
        if last.get("alive") == nodes and last.get("npu") == nodes * npus:
            return last
        wrong = npu_mismatch(last, addresses, npus) if last.get("alive") == nodes else []
        all_in_since = (all_in_since or time.monotonic()) if wrong else None
        if wrong and time.monotonic() - all_in_since >= SETTLED_SECONDS:
            raise LaunchError(f"Ray counts other NPU totals than the {npus} per node the job needs on "
                              f"{', '.join(wrong)}: that node's Ray was started with other resources "
                              "(a RAY_OVERRIDE_RESOURCES in its environment, or a `ray start` by hand)")
        if time.monotonic() > deadline:
            raise LaunchError(f"Ray reports {last.get('alive', '?')} node(s) and {last.get('npu', '?')} NPU, "
                              f"expected {nodes} and {nodes * npus}: " + json.dumps(last))
        time.sleep(1)


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
        result = conn.run(head.command(f"bash -c {shlex.quote(command)}"), out_stream=_Lines(on_line),
                          err_stream=stderr, warn=True, timeout=timeout + 15, in_stream=False)
        return result.exited, stderr.getvalue()[-2000:]
    except Exception as exc:  # CommandTimedOut, a dropped connection: the caller tears the cluster down
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def submit(head: HostSpec, node_dir: str, submission_id: str, timeout: float = TRANSFER) -> str:
    result = run_on(head, f"DAPO_SUBMISSION_ID={shlex.quote(submission_id)} bash "
                          f"{shlex.quote(node_dir + '/submit.sh')}", timeout=timeout)
    return result.raise_for("submitting the job", LaunchError)


# `ray job status` says "Status for job 'ID': RUNNING" while the job runs, "Job 'ID' succeeded" once it ended
_STATUS = re.compile(r"Status for job '[^']+': (\w+)|Job '[^']+' (succeeded|failed|was stopped|stopped)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def job_status(head: HostSpec, ray: str, dashboard: str, token_file: str, submission_id: str,
               timeout: float = COMMAND) -> str:
    result = run_on(head, f"{ray_client(ray, token_file, dashboard)} job status --address={shlex.quote(dashboard)} "
                          f"{shlex.quote(submission_id)}", timeout=timeout)
    out = result.raise_for("asking Ray for the job", LaunchError)
    match = _STATUS.search(_ANSI.sub("", out))
    if not match:
        raise LaunchError(f"Ray's job status on {head.name} was not understood: {out.strip()[-200:]}")
    if match.group(1):
        return match.group(1)
    return {"succeeded": "SUCCEEDED", "failed": "FAILED"}.get(match.group(2), "STOPPED")


def job_stop(head: HostSpec, ray: str, dashboard: str, token_file: str, submission_id: str,
             timeout: float = COMMAND) -> None:
    run_on(head, f"{ray_client(ray, token_file, dashboard)} job stop --address={shlex.quote(dashboard)} {shlex.quote(submission_id)} "
                 ">/dev/null 2>&1; true", timeout=timeout)


def job_logs(head: HostSpec, ray: str, dashboard: str, token_file: str, submission_id: str, follow: bool,
             stream) -> int:
    """`ray job logs` on the head into `stream` (its errors too); its exit code (not 0: Ray has no such job, or is
    down, and the stream holds why)."""
    conn = connect(head)
    try:
        client = ray_client(ray, token_file, dashboard)
        result = conn.run(head.command(f"{client} job logs --address={shlex.quote(dashboard)} "
                                       f"{'--follow ' if follow else ''}{shlex.quote(submission_id)}"),
                          out_stream=stream, err_stream=stream, warn=True, timeout=None if follow else 120,
                          in_stream=False)
        return result.exited
    finally:
        conn.close()
