"""`dapo-ops watch RUN --resume-on-failure N`: when the run fails (a node lost, or the job failed), wait until every
node of it answers again, then resume it from its last complete step (launch --resume), at most N times."""

from __future__ import annotations

import time

from dapo_ops.errors import DapoError, UsageError
from dapo_ops.fleet.ssh import QUICK, fan_out, run_on
from dapo_ops.inventory import Inventory
from dapo_ops.job.spec import load_spec
from dapo_ops.launch.launch import LaunchOptions, launch
from dapo_ops.launch.records import RunRecord
from dapo_ops.launch.resume import clear_previous, plan_resume
from dapo_ops.launch.steps import Steps
from dapo_ops.manifest import StackManifest


def wait_for_nodes(hosts: list, say, interval: float, limit: float) -> None:
    """Until every host answers over SSH (with its verified host key); DapoError after `limit` seconds."""
    deadline, said = time.monotonic() + limit, None
    while True:
        results = fan_out(hosts, lambda host: run_on(host, "true", timeout=QUICK)).results
        away = sorted(h.name for h in hosts if h.name not in results or results[h.name].failure is not None)
        if not away:
            return
        if away != said:
            say(f"waiting for {', '.join(away)} to answer again (every {interval:g} s, at most {limit:g} s)")
            said = away
        if time.monotonic() >= deadline:
            raise DapoError(f"{', '.join(away)} did not come back within {limit:g} s: not resumed")
        time.sleep(interval)


def resume_failed(record: RunRecord, inventory: Inventory, manifest: StackManifest, steps: Steps, say,
                  interval: float, limit: float, cause: str | None = None) -> RunRecord:
    """The failed run resumed once its nodes are back (on shared storage, at once when spare nodes can take the
    place of the ones gone): the new attempt's record, with the failure it follows (and the doctor's root cause of
    it, `cause`, when it has one)."""
    by_name = {h.name: h for h in inventory.hosts}
    resume = None
    if record.checkpoint_shared:
        try:
            resume = plan_resume(record, by_name, say)
        except UsageError as exc:
            say(f"not resumed at once: {exc}")
    if resume is None:
        missing = [n for n in record.nodes if n not in by_name]
        if missing:
            raise DapoError(f"run {record.run_id}'s nodes {', '.join(missing)} are not in the inventory: not resumed")
        wait_for_nodes([by_name[n] for n in record.nodes], say, interval, limit)
        resume = plan_resume(record, by_name, say)
    clear_previous(record, inventory, say)
    job_file = record.directory / "job.yaml"
    attempt = launch(load_spec(job_file), job_file, inventory, manifest,
                     LaunchOptions(len(resume.nodes), resume=resume), steps)
    attempt.resume_cause = record.reason + (f"; doctor: {cause}" if cause else "")
    attempt.save()
    return attempt
