"""Run records on the controller: runs/<run-id>/run.json plus the spec and the rendered files."""

from __future__ import annotations

import json
import os
import secrets
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dapo_ops.clock import utc_compact, utc_now
from dapo_ops.errors import DapoError, UsageError
from dapo_ops.files import write_text
from dapo_ops.job.render import RAY_TOKEN_NAME
from dapo_ops.launch.locks import process_start
from dapo_ops.model.run import IN_FLIGHT, RunState, may_move
from dapo_ops.paths import PROJECT_ROOT

RUNS_DIR = Path(os.environ.get("DAPO_OPS_RUNS_DIR") or PROJECT_ROOT / "runs" / "launch")


@dataclass
class RunRecord:
    run_id: str
    job: str
    nodes: list[str]
    head: str
    head_address: str
    dashboard: str
    node_dir: str                               # the run's directory on every node
    state: str = RunState.CREATED               # a RunState (dapo_ops/model/run.py), stored as its string
    reason: str | None = None
    submission_id: str | None = None
    stack: dict = field(default_factory=dict)   # what the audit saw per node
    timestamps: dict = field(default_factory=dict)
    rehearsal: dict | None = None
    addresses: dict = field(default_factory=dict)   # node -> the address Ray knows it by (its HCCL NIC's)
    launcher: dict = field(default_factory=dict)    # the launching process: host, pid, pid_start
    inventory: str | None = None                    # the inventory it was launched with (absolute path)
    # checkpoints (docs/checkpoints.md): the chain of attempts shares the first one's checkpoint directory
    chain: str | None = None                        # the first attempt's run id
    resumed_from: str | None = None                 # the attempt this one resumes (its run id)
    resume_step: int | None = None                  # the step it resumes from
    resume_cause: str | None = None                 # why the attempt it resumes ended (watch --resume-on-failure)
    checkpoint_root: str | None = None              # trainer.default_local_dir on every node
    world_size: int | None = None                   # ranks: a saved step is complete with every rank's shard
    checkpoint_shared: bool | None = None           # the checkpoint directory is one filesystem all nodes see
    checkpoint_keep: int | None = None              # trainer.max_actor_ckpt_to_keep: what watch prunes down to
    saved: dict = field(default_factory=dict)       # the last check of its saved steps (status, watch)

    @property
    def directory(self) -> Path:
        return RUNS_DIR / self.run_id

    @property
    def token_file(self) -> str:
        """The run's Ray token file on its nodes (Ray's token authentication; job/render.py ray_token_path)."""
        return f"{self.node_dir}/{RAY_TOKEN_NAME}"

    def mark(self, state: str, reason: str | None = None) -> None:
        if not may_move(self.state, state):
            raise DapoError(f"run {self.run_id} is {self.state}: it cannot become {state}")
        before = (self.state, self.reason, dict(self.timestamps))
        self.state = RunState(state)
        if reason is not None:
            self.reason = reason
        self.timestamps[state] = utc_now()
        try:
            self.save()
        except BaseException:  # not recorded: the run is still what it was (a later mark starts from there)
            self.state, self.reason, self.timestamps = before
            raise

    def save(self) -> None:
        tmp = self.directory / "run.json.tmp"
        write_text(tmp, json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")
        tmp.replace(self.directory / "run.json")


STOP_REQUESTED = "stop_requested"   # the timestamp `dapo-ops stop` records before it stops a running run's job


def new_run_id(job: str) -> str:
    return f"{job}-{utc_compact()}-{secrets.token_hex(2)}"


def this_launcher() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": process_start(os.getpid())}


def reap(record: RunRecord) -> RunRecord:
    """A run still `created` or `starting` whose launcher (on this controller) is gone — killed with SIGKILL, or
    crashed — is marked failed, with the clean-up to run when it had touched Ray."""
    launcher = record.launcher or {}
    if record.state not in IN_FLIGHT or launcher.get("host") != socket.gethostname():
        return record
    started = process_start(int(launcher.get("pid") or 0))
    if started is not None and started == launcher.get("pid_start"):
        return record
    cleanup = (f"; `dapo-ops stop {record.run_id}` stops what it started and frees its nodes"
               if RunState.STARTING in record.timestamps else "")
    record.mark(RunState.FAILED, f"its launcher (pid {launcher.get('pid')}) was killed before the launch ended{cleanup}")
    return record


def run_inventory(record: RunRecord, given: Path | str | None) -> Path | None:
    """The inventory a command about this run reads: -i's, else the one the run was launched with, else None (the
    configured one: dapo_ops.inventory.resolve_inventory)."""
    if given:
        return Path(given)
    if not record.inventory:
        return None
    path = Path(record.inventory)
    if not path.exists():
        raise UsageError(f"run {record.run_id} was launched with the inventory {path}, which is not there any more: "
                         "pass -i INVENTORY")
    return path


def load_run(run_id: str) -> RunRecord:
    path = RUNS_DIR / run_id / "run.json"
    try:
        return reap(RunRecord(**json.loads(path.read_text())))
    except FileNotFoundError:
        raise UsageError(f"no run {run_id!r} (see `dapo-ops runs`)") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"run record {path} is unreadable: {exc}") from None


def all_runs() -> list[RunRecord]:
    if not RUNS_DIR.exists():
        return []
    runs = []
    for path in sorted(RUNS_DIR.glob("*/run.json")):
        try:
            runs.append(reap(RunRecord(**json.loads(path.read_text()))))
        except (ValueError, TypeError):
            continue
    return sorted(runs, key=lambda r: r.timestamps.get("created", ""))


def latest_run() -> RunRecord:
    runs = all_runs()
    if not runs:
        raise UsageError("no runs yet (dapo-ops launch JOB.yaml)")
    return runs[-1]


RAY_TERMINAL = {"SUCCEEDED": RunState.SUCCEEDED, "FAILED": RunState.FAILED, "STOPPED": RunState.STOPPED}


def reconcile(record: RunRecord, ray_job_status: str | None) -> None:
    """A running run whose Ray job has ended takes the job's end state (and records it)."""
    if record.state == RunState.RUNNING and ray_job_status in RAY_TERMINAL:
        record.mark(RAY_TERMINAL[ray_job_status],
                    None if ray_job_status == "SUCCEEDED" else f"Ray reports the job {ray_job_status}")


def needs_ray_status(record: RunRecord) -> bool:
    return bool(record.submission_id) and record.state in (RunState.RUNNING, RunState.SUCCEEDED)
