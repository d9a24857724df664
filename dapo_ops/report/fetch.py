"""A run's logs onto the controller, over SSH: the job's console as `ray job logs` gives it on the head (what
`dapo-ops logs RUN` prints), and verl's file-logger JSONL from whichever node has it (optional: the TaskRunner may
run on any node, and the file may be missing, cut short by a resume, or never written)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dapo_ops.errors import DapoError, UsageError
from dapo_ops.files import make_dirs
from dapo_ops.model.run import RunState
from dapo_ops.fleet.ssh import TRANSFER

CONSOLE_NAME, JSONL_NAME = "console.log", "metrics.jsonl"


@dataclass
class FetchedLogs:
    console: Path
    jsonl: Path | None
    npus: int | None            # the NPUs of the run's nodes, as the inventory declares them
    earlier: list[Path] = field(default_factory=list)   # the logs of the attempts it resumes, oldest first


def _run_hosts(record, inventory) -> list:
    by_name = {h.name: h for h in inventory.hosts}
    if record.head not in by_name:
        raise UsageError(f"run {record.run_id}'s head {record.head} is not in the inventory")
    return [by_name[record.head]] + [by_name[n] for n in record.nodes if n != record.head and n in by_name]


def _spec(record):
    from dapo_ops.job.spec import load_spec

    path = record.directory / "job.yaml"
    return load_spec(path) if path.exists() else None


def fetch_console(record, head, path: Path) -> Path:
    from dapo_ops.launch import cluster

    if not record.submission_id:
        raise UsageError(f"run {record.run_id} was never submitted ({record.state}: {record.reason})")
    partial = path.with_name(path.name + ".part")
    with open(partial, "w", encoding="utf-8", errors="replace") as stream:
        exit_code = cluster.job_logs(head, head.layout.ray, record.dashboard, record.token_file,
                                     record.submission_id, False, stream)
    if exit_code != 0:
        from dapo_ops.launch.archive import tail

        raise cluster.LaunchError(f"`ray job logs` on {head.name} exited {exit_code}: {tail(partial)}")
    partial.replace(path)
    return path


def fetch_jsonl(hosts: list, remote: str, path: Path, say: Callable[[str], None]) -> Path | None:
    from dapo_ops.fleet.ssh import run_on

    for host in hosts:
        result = run_on(host, f"cat -- {shlex.quote(remote)}", timeout=TRANSFER)
        if result.failure is None and result.exit_code == 0 and result.stdout.strip():
            path.write_text(result.stdout, encoding="utf-8")
            return path
    say(f"verl's file-logger JSONL {remote} is on none of {', '.join(h.name for h in hosts)}: the console alone")
    return None


def _npus(hosts: list) -> int | None:
    from dapo_ops.errors import InventoryError

    try:
        return sum(h.npus for h in hosts)
    except InventoryError:
        return None


def earlier_attempts(record) -> list:
    """The submitted attempts a resumed run continues, oldest first (launch --resume links each to the last)."""
    from dapo_ops.launch.records import load_run

    chain, seen = [], {record.run_id}
    while record.resumed_from and record.resumed_from not in seen:
        seen.add(record.resumed_from)
        try:
            record = load_run(record.resumed_from)
        except UsageError:
            break
        if record.submission_id:
            chain.append(record)
    return chain[::-1]


def fetch_attempt_log(attempt, hosts: list, spec, directory: Path, say: Callable[[str], None]) -> Path | None:
    """An earlier attempt's steps: the console kept when it ended (launch/archive.py), else its file-logger JSONL."""
    from dapo_ops.job.render import job_paths
    from dapo_ops.launch.archive import console_path

    if console_path(attempt).is_file():
        return console_path(attempt)
    if spec is None:
        return None
    return fetch_jsonl(hosts, job_paths(spec, attempt.run_id).file_logger,
                       directory / f"{attempt.run_id}-{JSONL_NAME}", say)


def fetch_run_logs(record, inventory, directory: Path, say: Callable[[str], None]) -> FetchedLogs:
    from dapo_ops.job.render import job_paths

    hosts = _run_hosts(record, inventory)
    make_dirs(directory)
    say(f"fetching the console of Ray job {record.submission_id} from {hosts[0].name}")
    try:
        console = fetch_console(record, hosts[0], directory / CONSOLE_NAME)
    except DapoError:
        from dapo_ops.launch.archive import console_path

        if not console_path(record).is_file():
            raise
        say(f"Ray no longer has the job's console: the copy kept when it ended ({console_path(record)})")
        console = console_path(record)
    spec = _spec(record)
    jsonl = (fetch_jsonl(hosts, job_paths(spec, record.run_id).file_logger, directory / JSONL_NAME, say)
             if spec is not None else None)
    earlier = [path for attempt in earlier_attempts(record)
               if (path := fetch_attempt_log(attempt, hosts, spec, directory, say)) is not None]
    return FetchedLogs(console, jsonl, _npus(hosts), earlier)


def job_ended(record, inventory) -> bool:
    """Whether the run's Ray job has ended (for --follow); a run that is no longer running has."""
    from dapo_ops.launch import cluster
    from dapo_ops.launch.records import RAY_TERMINAL

    if record.state != RunState.RUNNING or not record.submission_id:
        return True
    head = _run_hosts(record, inventory)[0]
    status = cluster.job_status(head, head.layout.ray, record.dashboard, record.token_file,
                                record.submission_id)
    return status in RAY_TERMINAL
