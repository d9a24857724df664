"""`dapo-ops launch`, `status`, `logs`, `stop` and `runs`: a job's run on the fleet, recorded on the controller."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import click

from dapo_ops.cli.options import inventory_option, json_option, model_config_option, require_positive
from dapo_ops.cli.output import Output, StepPrinter, as_dict
from dapo_ops.errors import DapoError, UsageError
from dapo_ops.model.run import RunState


def run_context(run: str | None, inventory: Path | None):
    """The run's record (default: the latest), its inventory (-i, else the one it was launched with), and the run's
    head host from it."""
    from dapo_ops.inventory import load_inventory
    from dapo_ops.launch.records import latest_run, load_run, run_inventory

    record = load_run(run) if run else latest_run()
    inv = load_inventory(run_inventory(record, inventory))
    by_name = {h.name: h for h in inv.hosts}
    if record.head not in by_name:
        raise UsageError(f"run {record.run_id}'s head {record.head} is not in the inventory")
    return record, inv, by_name[record.head]


def _interrupt_on_term_and_hup() -> None:
    """SIGTERM (kill, a scheduler's cancel) and SIGHUP (a closed terminal) end a launch as Ctrl-C does: what was
    started is torn down and the run recorded as interrupted."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)


@click.command()
@click.argument("job_file", type=click.Path(path_type=Path), required=False)
@click.option("--nodes", type=int, help="How many inventory nodes to run on (the head first).")
@click.option("--resume", "resume_run", metavar="RUN",
              help="Launch RUN's job again from its last checkpoint complete on every node (its spec and nodes).")
@inventory_option
@click.option("--rehearse-only", is_flag=True,
              help="Bring Ray up, run the rehearsal, tear Ray down again; submit nothing.")
@click.option("--no-audit", is_flag=True, help="Skip the audit gate.")
@click.option("--force", is_flag=True, help="Launch even when the audit finds errors.")
@click.option("--break-lock", is_flag=True, help="Remove a stale cluster lock left by a dead launch first.")
@model_config_option
@json_option
def launch(job_file: Path | None, nodes: int | None, resume_run: str | None, inventory: Path | None,
           rehearse_only: bool, no_audit: bool, force: bool, break_lock: bool, model_config: Path | None,
           as_json: bool) -> None:
    """Audit the nodes, lock the cluster, push the rendered files, bring Ray up, rehearse, submit the DAPO job."""
    from dapo_ops.inventory import load_inventory
    from dapo_ops.job.spec import load_spec
    from dapo_ops.launch.launch import LaunchOptions, launch as launch_job
    from dapo_ops.launch.steps import Steps
    from dapo_ops.manifest import load_manifest

    out = Output(as_json)
    resume = None
    if resume_run:
        job_file, nodes, inv, resume = _resume_plan(resume_run, job_file, nodes, inventory, out)
    elif job_file is None or nodes is None:
        raise UsageError("launch needs JOB_FILE and --nodes N (or --resume RUN)")
    else:
        inv = load_inventory(inventory)
    require_positive(nodes=nodes)
    _interrupt_on_term_and_hup()
    spec, manifest = load_spec(job_file), load_manifest()
    options = LaunchOptions(nodes, no_audit=no_audit, force=force, break_lock=break_lock, rehearse_only=rehearse_only,
                            model_config=model_config, resume=resume)
    record = launch_job(spec, job_file, inv, manifest, options, Steps(StepPrinter(out.console)))
    if record.state == RunState.REHEARSED:
        out.success(f"{record.run_id}: rehearsal passed on {', '.join(record.nodes)}; Ray stopped, "
                 "nothing submitted")
    else:
        out.success(f"{record.run_id}: submitted as {record.submission_id} on {record.head}"
                    + (f", resuming {record.resumed_from} from step {record.resume_step}" if record.resumed_from
                       else "") + f"; follow it with `dapo-ops logs {record.run_id} --follow`")
    out.document(as_dict(record))


def _resume_plan(run: str, job_file: Path | None, nodes: int | None, inventory: Path | None, out: Output):
    """launch --resume RUN: the run's own copy of its spec, its node count, its inventory, and the step to resume
    from (read on its nodes)."""
    from dapo_ops.launch.resume import plan_resume

    if job_file is not None or nodes is not None:
        raise UsageError("--resume RUN relaunches RUN's own job on its own nodes: give no JOB_FILE or --nodes")
    from dapo_ops.inventory import load_inventory
    from dapo_ops.launch.records import load_run, run_inventory
    from dapo_ops.launch.resume import clear_previous

    record = load_run(run)
    inv = load_inventory(run_inventory(record, inventory))
    resume = plan_resume(record, {h.name: h for h in inv.hosts}, out.note)
    clear_previous(record, inv, out.note)
    return record.directory / "job.yaml", len(record.nodes), inv, resume


on_node_loss_option = click.option(
    "--on-node-loss", type=click.Choice(["stop", "keep"]), default="stop", show_default=True,
    help="When a node of a running run is lost: stop the job and Ray on the rest, or leave them running.")


@click.command()
@click.argument("run", required=False)
@inventory_option
@on_node_loss_option
@json_option
def status(run: str | None, inventory: Path | None, on_node_loss: str, as_json: bool) -> None:
    """The state of a run (default: the latest): for a running one, its nodes, NPUs and Ray job, checked now."""
    from dapo_ops.launch import cluster
    from dapo_ops.launch.records import needs_ray_status, reconcile
    from dapo_ops.launch.watch import watch_once

    out = Output(as_json)
    record, inv, head = run_context(run, inventory)
    job, lost = None, {}
    if record.state == RunState.RUNNING:
        health = watch_once(record, _run_hosts(record, inv), on_node_loss, out.note)
        job, lost = health.job, health.lost
    elif needs_ray_status(record):
        job = cluster.job_status(head, head.layout.ray, record.dashboard, record.token_file,
                                     record.submission_id)
        reconcile(record, job)
    out.info(f"{record.run_id}: {record.state}" + (f" (Ray job {record.submission_id}: {job})" if job else "") +
             (f" — {record.reason}" if record.reason else ""))
    if record.checkpoint_root and record.world_size and record.submission_id:
        from dapo_ops.launch.saved_record import check_saved_steps

        out.info(f"checkpoints: {check_saved_steps(record, _run_hosts(record, inv))}")
    out.document(dict(as_dict(record), ray_job_status=job))
    if record.state == RunState.FAILED or lost:
        raise DapoError(f"run {record.run_id} {record.state}: {record.reason}")


def _run_hosts(record, inv) -> dict:
    by_name = {h.name: h for h in inv.hosts}
    missing = [n for n in record.nodes if n not in by_name]
    if missing:
        raise UsageError(f"run {record.run_id}'s nodes {', '.join(missing)} are not in the inventory")
    return by_name


@click.command()
@click.argument("run", required=False)
@inventory_option
@on_node_loss_option
@click.option("--interval", type=float, default=10.0, show_default=True, help="Seconds between checks.")
@click.option("--resume-on-failure", "resumes", type=int, default=0, metavar="N",
              help="When the run fails, wait for its nodes and resume it from its last complete checkpoint, at "
                   "most N times (launch --resume).")
@click.option("--wait-for-nodes", type=float, default=3600.0, show_default=True, metavar="SECONDS",
              help="With --resume-on-failure: how long to wait for a lost node to answer again.")
@click.option("--hardware/--no-hardware", default=True, show_default=True,
              help="At each check, sample the run's NPUs (as `top`), record them in the run and say new alerts.")
def watch(run: str | None, inventory: Path | None, on_node_loss: str, interval: float, resumes: int,
          wait_for_nodes: float, hardware: bool) -> None:
    """Check a running run every --interval seconds until its job ends or a node is lost (exit 0 only when the
    job succeeded); with --resume-on-failure, go on with a resumed attempt."""
    out = Output(False)
    require_positive(interval=interval, wait_for_nodes=wait_for_nodes)
    if resumes < 0:
        raise UsageError("--resume-on-failure must be 0 or more")
    record, inv, _ = run_context(run, inventory)
    if record.state != RunState.RUNNING:
        raise UsageError(f"run {record.run_id} is {record.state}, not running: nothing to watch")
    if resumes and on_node_loss == "keep":
        raise UsageError("--resume-on-failure resumes a run it has stopped: it cannot go with --on-node-loss keep")
    if resumes:
        _interrupt_on_term_and_hup()   # a resumed attempt's launch torn down as a launch is
    attempts = 0
    while True:
        _watch_until_over(record, _run_hosts(record, inv), on_node_loss, interval, out, hardware)
        if record.state == RunState.SUCCEEDED:
            out.success(f"{record.run_id}: succeeded")
            return
        if record.state != RunState.FAILED or attempts >= resumes:
            raise DapoError(f"run {record.run_id} {record.state}: {record.reason}")
        attempts += 1
        out.note(f"{record.run_id} failed ({record.reason}): resuming it, attempt {attempts} of {resumes}")
        record = _resume(record, inv, interval, wait_for_nodes, out)


def _watch_until_over(record, by_name: dict, on_node_loss: str, interval: float, out: Output,
                      sample_hardware: bool = True) -> None:
    from dapo_ops.launch.saved_record import TEND_EVERY, tend_checkpoints
    from dapo_ops.launch.watch import watch_once
    from dapo_ops.telemetry.series import hardware_watch

    last, checks = None, 0
    hardware = hardware_watch([by_name[n] for n in record.nodes], record.directory, sample_hardware, interval)
    try:
        while record.state == RunState.RUNNING:
            health = watch_once(record, by_name, on_node_loss, out.note)
            for line in hardware.check():
                out.warning(line)
            checks += 1
            if (record.state == RunState.RUNNING and not health.lost and record.checkpoint_keep
                    and record.world_size and checks % TEND_EVERY == 0):
                tend_checkpoints(record, by_name, out.note)
            line = f"{record.run_id}: {record.state}, Ray job {health.job or '?'}" + (
                f", lost: {', '.join(sorted(health.lost))}" if health.lost
                else f", {len(record.nodes)} node(s) healthy")
            if line != last:
                out.note(line)
                last = line
            if record.state == RunState.RUNNING:
                time.sleep(interval)
    finally:
        hardware.close()


def doctor_cause(record) -> str | None:
    """The doctor's root cause in the console kept when the attempt ended (launch/archive.py), if it finds one."""
    from dapo_ops.doctor.diagnose import diagnose_paths
    from dapo_ops.launch.archive import console_path

    if not console_path(record).is_file():
        return None
    try:
        found = diagnose_paths([console_path(record)])
    except DapoError:
        return None
    return f"{found.root.signature}: {found.root.cause}" if found.found and found.root else None


def _resume(record, inv, interval: float, wait_for_nodes: float, out: Output):
    from dapo_ops.launch.auto_resume import resume_failed
    from dapo_ops.launch.steps import Steps
    from dapo_ops.manifest import load_manifest

    cause = doctor_cause(record)
    if cause:
        out.note(f"{record.run_id}: doctor's root cause: {cause}")
    attempt = resume_failed(record, inv, load_manifest(), Steps(StepPrinter(out.console)), out.note, interval,
                            wait_for_nodes, cause)
    out.note(f"{attempt.run_id}: resumes {record.run_id} from step {attempt.resume_step}")
    return attempt


@click.command()
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep streaming until the job ends.")
@inventory_option
def logs(run: str, follow: bool, inventory: Path | None) -> None:
    """The driver log of a run's job."""
    from dapo_ops.launch import cluster

    from dapo_ops.launch.archive import console_path

    record, _, head = run_context(run, inventory)
    if not record.submission_id:
        raise UsageError(f"run {record.run_id} was never submitted ({record.state}: {record.reason})")
    if record.state != RunState.RUNNING and console_path(record).is_file():  # kept when it ended; Ray may be gone
        sys.stdout.write(console_path(record).read_text(errors="replace"))
        return
    exit_code = cluster.job_logs(head, head.layout.ray, record.dashboard, record.token_file, record.submission_id,
                                 follow, sys.stdout)
    if exit_code != 0:
        raise DapoError(f"`ray job logs` on {head.name} exited {exit_code} (above)")


@click.command()
@click.argument("run")
@inventory_option
@json_option
def stop(run: str, inventory: Path | None, as_json: bool) -> None:
    """Stop a run's job, stop Ray on its nodes, release the cluster lock."""
    from dapo_ops.launch.stop import stop as stop_run

    out = Output(as_json)
    record, inv, _ = run_context(run, inventory)
    record = stop_run(record, inv, say=out.note)
    out.info(f"{record.run_id}: {record.state}")
    out.document(as_dict(record))


@click.command()
@json_option
def runs(as_json: bool) -> None:
    """The runs this controller launched."""
    from dapo_ops.cli.runs_table import runs_table
    from dapo_ops.launch.records import all_runs

    out = Output(as_json)
    records = all_runs()
    out.table(runs_table(records, out.console.width))
    out.document([as_dict(r) for r in records])
