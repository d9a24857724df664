"""A run's job console kept on the controller before Ray goes down: `ray job logs` needs the Ray cluster that ran the
job, so once a lost node or a `stop` has stopped Ray, only this copy is left. The report of a resumed run joins the
attempts of its chain from these (dapo_ops/report/fetch.py)."""

from __future__ import annotations

from pathlib import Path

from dapo_ops.errors import DapoError
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.launch import cluster
from dapo_ops.launch.records import RunRecord

CONSOLE = "console.log"


def tail(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return lines[-1][-200:] if lines else "no output"


def console_path(record: RunRecord) -> Path:
    return record.directory / CONSOLE


def keep_console(record: RunRecord, head: HostSpec, say) -> Path | None:
    """Write the job's console as Ray has it now into the run's directory (whole, or not at all)."""
    if not record.submission_id:
        return None
    path = console_path(record)
    partial = path.with_name(path.name + ".part")
    try:
        with open(partial, "w", encoding="utf-8", errors="replace") as stream:
            exit_code = cluster.job_logs(head, head.layout.ray, record.dashboard, record.token_file,
                                         record.submission_id, False, stream)
        if exit_code != 0:
            raise DapoError(f"`ray job logs` exited {exit_code}: {tail(partial)}")
        partial.replace(path)
        return path
    except (DapoError, OSError) as exc:
        partial.unlink(missing_ok=True)
        say(f"the job's console could not be kept in {path} ({exc}): a report of a resumed run lacks its steps")
        return None
