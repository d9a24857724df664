"""`dapo-ops launch`: pick the nodes, audit them, lock the cluster, render and push the files, bring Ray up,
submit the DAPO job, and record the run. Any failure tears down what was started and marks the run failed."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from secrets import token_hex
from typing import Iterator

from dapo_ops.clock import utc_now
from dapo_ops.errors import DapoError, UsageError
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.fleet.nic import read_addresses
from dapo_ops.inventory import Inventory
from dapo_ops.job.checkpoints import CheckpointRun, checkpoint_root
from dapo_ops.job.placement import job_ray_ports, place, world_size
from dapo_ops.job.ray_tls import run_credentials
from dapo_ops.job.render import RAY_TOKEN_NAME, dashboard_url, pick_nodes, render, write
from dapo_ops.job.secrets import job_secrets, secret_files
from dapo_ops.job.spec import JobSpec
from dapo_ops.launch import cluster, locks, rehearsal
from dapo_ops.launch.gates import audit_nodes, run_rehearsal
from dapo_ops.launch.node_checks import check_checkpoint_space, check_host_memory, check_ray_ports, verify_host_keys
from dapo_ops.launch.records import RunRecord, all_runs, new_run_id, this_launcher
from dapo_ops.launch.resume import Resume, moved_ranks
from dapo_ops.launch.steps import Steps
from dapo_ops.launch import teardown
from dapo_ops.launch.teardown import sweep_dead_runs
from dapo_ops.model.timeouts import DEFAULT_TIMEOUTS, INVENTORY_VAR as TIMEOUTS_VAR, bring_up_limit, step_timeouts
from dapo_ops.manifest import StackManifest
from dapo_ops.model.run import RunState

# The bring-up limit of a lock that does not record its own (timeouts.bring_up_limit of the defaults).
BRING_UP_LIMIT = bring_up_limit(DEFAULT_TIMEOUTS, rehearsal.Timeouts().total)


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    nodes: int
    no_audit: bool = False
    force: bool = False
    break_lock: bool = False
    rehearse_only: bool = False
    model_config: Path | None = None     # the model's config.json when model.path is not readable here
    resume: Resume | None = None         # launch --resume: the attempt resumed, its step and nodes (resume.py)


def plan(spec: JobSpec, inventory: Inventory, manifest: StackManifest, nodes: int, model_config: Path | None = None,
         only: tuple[str, ...] = ()):
    """Step 1, before any change: the job placed on `nodes` inventory nodes (their NPUs per node; `only` these, in
    this order) and checked with every check `dapo-ops validate` runs (verl's composed configuration, the
    arithmetic, the memory estimate). Returns the placed spec, its hosts and the validation."""
    from dapo_ops.job.validate import config_sources, validate

    by_name = {h.name: h for h in inventory.hosts}
    spec, hosts = place(spec, [by_name[n] for n in only] if only else list(inventory.hosts), nodes)
    checked = validate(spec, manifest, config_sources(None, manifest), model_config)
    problems = checked.errors
    if problems:
        more = f" (and {len(problems) - 1} more: `dapo-ops validate` lists them)" if len(problems) > 1 else ""
        raise UsageError(problems[0] + more)
    return spec, hosts, checked


@contextmanager
def failing_as(record: RunRecord, what: str | None = None) -> Iterator[None]:
    """Mark the run failed when the block raises ("interrupted" for Ctrl-C, else the error, prefixed by `what`),
    unless the block already recorded a more precise reason; the exception goes on."""
    try:
        yield
    except BaseException as exc:
        if record.state != RunState.FAILED:
            reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
            record.mark(RunState.FAILED, f"{what}: {reason}" if what and reason != "interrupted" else reason)
        raise


@dataclasses.dataclass
class _Launch:
    """One launch in progress: what every step reads, so each step is a method named after what it does."""

    spec: JobSpec
    manifest: StackManifest
    options: LaunchOptions
    steps: Steps
    hosts: list[HostSpec]
    nodes: list
    record: RunRecord
    backend: str
    timeouts: dict[str, int]

    @property
    def head(self) -> HostSpec:
        return self.hosts[0]

    @property
    def ray(self) -> dict[str, str]:
        return {n.name: n.ray for n in self.nodes}

    @property
    def ranks(self) -> int:
        return len(self.hosts) * self.spec.cluster.npus_per_node

    def audit(self) -> None:
        record, options = self.record, self.options
        with self.steps.step(f"audit {', '.join(record.nodes)}") as step, failing_as(record, "audit"):
            report = audit_nodes(self.hosts, self.manifest, self.spec.cluster.npus_per_node, self.timeouts["audit"])
            record.stack = {h.host: h.components for h in report.hosts}
            record.save()
            if report.errors and not options.force:
                reason = "; ".join(f"{f.host}: {f.message}" for f in report.errors[:5])
                record.mark(RunState.FAILED, f"audit found {len(report.errors)} error(s): {reason}")
                raise DapoError(f"audit found {len(report.errors)} error(s) on the chosen nodes (use --force to "
                                f"launch anyway): {reason}")
            step.done(f"{len(report.errors)} error(s), {len(report.warnings)} warning(s)"
                      + (" — launching anyway (--force)" if report.errors else ""))

    def lock(self) -> None:
        names, record = ", ".join(h.name for h in self.hosts), self.record
        with self.steps.step(f"lock {names}") as step, failing_as(record, "run lock"):
            if self.options.break_lock:
                for line in locks.break_stale(self.hosts, BRING_UP_LIMIT):
                    self.steps.note(line)
            try:
                locks.acquire(self.hosts, record.run_id,
                              bring_up_limit(self.timeouts, rehearsal.Timeouts().total))
            except locks.ClusterLocked as exc:
                record.mark(RunState.FAILED, f"locked by {exc.holder.describe()}")
                raise DapoError(locks.describe_refusal(exc, self.hosts, BRING_UP_LIMIT)) from None
            step.done(f"held by run {record.run_id} on {len(self.hosts)} node(s)")

    def push(self, job_file: Path) -> None:
        spec, record, head = self.spec, self.record, self.head
        with self.steps.step("render and push") as step:
            files = render(spec, self.nodes, self.manifest, attempt=record.run_id,
                           checkpoints=CheckpointRun(record.chain or record.run_id, record.resume_step))
            write(files, record.directory / "rendered")
            shutil.copyfile(job_file, record.directory / "job.yaml")
            files[f"nodes/{head.name}/rehearsal.json"] = json.dumps(rehearsal.config(spec, self.nodes, self.backend),
                                                                     indent=2)
            for path in rehearsal.DRIVER_FILES:
                files[f"nodes/{head.name}/{path.name}"] = path.read_text()
            # a new Ray token per run (Ray's token authentication); a rehearsal runs no job: it gets no secret
            private = {RAY_TOKEN_NAME: token_hex(32) + "\n"}
            secrets = None if self.options.rehearse_only else job_secrets(spec)
            if secrets:
                private.update(secret_files(spec, secrets))
            # RAY_TLS: each node's certificate and key, from a CA made for this run and dropped here
            tls = run_credentials(record.run_id, record.addresses) if self.nodes[0].tls else {}
            cluster.push_all(self.hosts, files, record.node_dir, private, tls)
            names = sorted(private) + (sorted(next(iter(tls.values()))) if tls else [])
            step.done(f"{len(files)} files to {record.node_dir}, {', '.join(names)} 0600")

    def stop_leftovers(self) -> None:
        with self.steps.step("stop Ray leftovers (and dead runs' firewall tables and private files)"):
            unreachable = {h: e for h, e in cluster.ray_stop(self.hosts, self.ray, timeout=self.timeouts["stop"],
                                                             only_if_running=True,
                                                             first=f"{cluster.DROP_RUN_TABLES}; "
                                                                   f"{sweep_dead_runs(self.record.run_id)}").items()
                           if e}
            if unreachable:
                raise cluster.LaunchError("stopping Ray leftovers: " + "; ".join(unreachable.values()))

    def check_ports(self) -> None:
        with self.steps.step("check that nothing else holds Ray's ports"):
            check_ray_ports(self.hosts, job_ray_ports(self.spec, self.hosts))

    def start_ray(self) -> None:
        workers = self.hosts[1:]
        with self.steps.step(f"start Ray: the head on {self.head.name}" +
                             (f", {len(workers)} worker(s)" if workers else "")):
            cluster.start_cluster(self.head, workers, self.record.node_dir, self.timeouts["head"],
                                  self.timeouts["workers"])

    def wait_for_ray(self) -> None:
        npus, record = self.spec.cluster.npus_per_node, self.record
        with self.steps.step(f"wait for {len(self.hosts)} node(s) and {self.ranks} NPU in Ray") as step:
            seen = cluster.wait_for_cluster(self.head, self.nodes[0].python, record.dashboard, record.token_file,
                                            record.addresses, npus,
                                            time.monotonic() + self.timeouts["cluster"])
            record.timestamps["ray_up"] = utc_now()
            step.done(f"{seen['alive']} nodes, {seen['npu']:.0f} NPU")

    def rehearse(self) -> None:
        with self.steps.step(f"rehearse {self.ranks} ranks ({self.backend})") as step:
            result = run_rehearsal(self.head, self.record, self.nodes[0].python, self.steps)
            timings = result.timing_summary()
            step.done(f"{result.ranks} ranks on {len(result.hosts)} hosts; " + ", ".join(
                f"{phase} median {t['median'] * 1000:.0f} ms, slowest rank {t['slowest_rank']} "
                f"({t['max'] * 1000:.0f} ms)" for phase, t in timings.items() if phase != "check"))

    def tear_down_rehearsal(self) -> None:
        with self.steps.step("tear down (--rehearse-only)"):
            errors = teardown.tear_down(self.hosts, self.record.run_id, self.record.node_dir, self.timeouts["stop"])
            if errors:
                raise cluster.LaunchError("the rehearsal passed, but " + teardown.left_on(errors, self.record.run_id))

    def submit(self) -> None:
        record = self.record
        with self.steps.step("submit the DAPO job") as step:
            record.submission_id = f"dapo-{record.run_id}"
            cluster.submit(self.head, record.node_dir, record.submission_id, self.timeouts["submit"])
            step.done(f"submission {record.submission_id}")

    @contextmanager
    def torn_down_on_failure(self) -> Iterator[None]:
        """Once Ray may have been touched: a failure stops Ray where it was started and releases the lock."""
        record = self.record
        try:
            with failing_as(record):  # first: a second Ctrl-C during the teardown still leaves a true record
                yield
        except BaseException as exc:
            with self.steps.step("tear down after the failure"):
                errors = teardown.tear_down(self.hosts, record.run_id, record.node_dir, self.timeouts["stop"],
                                            note=self.steps.note)
            if errors:
                record.mark(RunState.FAILED, f"{record.reason} ({teardown.left_on(errors, record.run_id)})")
            if isinstance(exc, KeyboardInterrupt):
                raise DapoError("launch interrupted; what was started has been torn down" + (
                    f", but for Ray on {', '.join(sorted(errors))} (`dapo-ops stop {record.run_id}` retries)"
                    if errors else "")) from None
            raise


def _prepare(spec: JobSpec, inventory: Inventory, manifest: StackManifest, options: LaunchOptions,
             steps: Steps) -> _Launch:
    """Plan the job and read the nodes' HCCL addresses (nothing changes yet), then create the run record."""
    with steps.step("plan") as step:
        resume = options.resume
        spec, hosts, checked = plan(spec, inventory, manifest, options.nodes, options.model_config,
                                    resume.nodes if resume else ())
        backend = rehearsal.backend_for(hosts[0].vars)
        timeouts = step_timeouts(hosts[0].vars.get(TIMEOUTS_VAR), f"{hosts[0].name}: {TIMEOUTS_VAR}")
        step.done(f"{len(hosts)} x {spec.cluster.npus_per_node} NPU on {', '.join(h.name for h in hosts)} "
                  f"(head {hosts[0].name}), rehearsal over {backend}")
    with steps.step("check every node's host key") as step:
        verify_host_keys(hosts)
        step.done(f"{len(hosts)} node(s) answered")
    with steps.step("read the HCCL NIC addresses") as step:
        addresses = read_addresses(hosts)
        moved = moved_ranks(resume, addresses) if resume else None
        if moved:
            raise UsageError(f"cannot resume run {resume.previous} on node-local checkpoints: {moved}")
        step.done(", ".join(f"{name} {ip}" for name, ip in addresses.items()))
    need = checked.host["host_mem_gib"]
    with steps.step(f"check each node's memory (the job needs about {need:.0f} GiB per node)") as step:
        step.done(check_host_memory(hosts, need, steps))
    run_id = new_run_id(spec.name)
    chain = resume.chain if resume else run_id
    saving, shared = checked.saving, None
    if saving and saving.saves:
        with steps.step(f"check the space for the checkpoints ({checked.checkpoint['checkpoint_node_gib']:.0f} GiB "
                        "per node per saved step)") as step:
            said, shared = check_checkpoint_space(hosts, checkpoint_root(spec, chain),
                                                  checked.checkpoint["checkpoint_node_gib"], saving.keep)
            step.done(said)
    nodes = pick_nodes(hosts, manifest, addresses)
    record = RunRecord(run_id=run_id, job=spec.name, nodes=[h.name for h in hosts], head=hosts[0].name,
                       head_address=nodes[0].ip, dashboard=dashboard_url(spec),
                       node_dir=cluster.node_dir(run_id), addresses={n.name: n.ip for n in nodes},
                       launcher=this_launcher(), inventory=os.path.abspath(inventory.source), chain=chain,
                       resumed_from=resume.previous if resume else None, resume_step=resume.step if resume else None,
                       checkpoint_root=checkpoint_root(spec, chain), world_size=world_size(spec),
                       checkpoint_shared=shared, checkpoint_keep=saving.keep if saving else None)
    record.mark(RunState.CREATED)
    return _Launch(spec, manifest, options, steps, hosts, nodes, record, backend, timeouts)


def launch(spec: JobSpec, job_file: Path, inventory: Inventory, manifest: StackManifest, options: LaunchOptions,
           steps: Steps) -> RunRecord:
    all_runs()  # earlier runs whose launcher was killed are marked so before this one starts (records.reap)
    run = _prepare(spec, inventory, manifest, options, steps)
    if not options.no_audit:
        run.audit()
    run.lock()
    with run.torn_down_on_failure():
        run.push(job_file)
        run.record.mark(RunState.STARTING)
        run.stop_leftovers()
        run.check_ports()
        run.start_ray()
        run.wait_for_ray()
        run.rehearse()
        if options.rehearse_only:
            run.tear_down_rehearsal()
            run.record.mark(RunState.REHEARSED)
            return run.record
        run.submit()
    run.record.mark(RunState.RUNNING)
    return run.record
