"""`dapo-ops launch`: pick the nodes, audit them, lock the cluster, render and push the files, bring Ray up,
submit the DAPO job, and record the run. Any failure tears down what was started and marks the run failed."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from pathlib import Path

from dapo_ops.errors import DapoError, UsageError
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.inventory import Inventory
from dapo_ops.job.render import pick_nodes, render, write
from dapo_ops.job.spec import JobSpec
from dapo_ops.job.validate import arithmetic
from dapo_ops.launch import cluster
from dapo_ops.launch.records import RunRecord, new_run_id
from dapo_ops.manifest import StackManifest

STEP_TIMEOUTS = {"head": 120, "workers": 120, "cluster": 90, "submit": 120}


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    nodes: int
    no_audit: bool = False
    force: bool = False
    break_lock: bool = False


def plan(spec: JobSpec, inventory: Inventory, manifest: StackManifest, nodes: int) -> tuple[JobSpec, list[HostSpec]]:
    """Step 1, before any change: the job on `nodes` nodes, checked against the inventory."""
    if nodes != spec.cluster.nodes:
        spec = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, nodes=nodes))
    problems = arithmetic(spec, [int(h.vars.get("npus_per_node") or 0) for h in inventory.hosts], manifest)
    if problems:
        raise UsageError(problems[0])
    chosen = [n.name for n in pick_nodes(spec, list(inventory.hosts), manifest)]
    by_name = {h.name: h for h in inventory.hosts}
    return spec, [by_name[name] for name in chosen]


def launch(spec: JobSpec, job_file: Path, inventory: Inventory, manifest: StackManifest, options: LaunchOptions,
           say) -> RunRecord:
    spec, hosts = plan(spec, inventory, manifest, options.nodes)
    head, workers = hosts[0], hosts[1:]
    nodes = pick_nodes(spec, hosts, manifest)
    ray = {n.name: f"{n.env_prefix}/bin/ray" for n in nodes}
    run_id = new_run_id(spec.name)
    record = RunRecord(run_id=run_id, job=spec.name, nodes=[h.name for h in hosts], head=head.name,
                       head_address=head.address, dashboard=f"http://{head.address}:{spec.cluster.dashboard_port}",
                       node_dir=f"{cluster.RUNS_ROOT}/{run_id}")
    record.mark("created")

    if not options.no_audit:
        say(f"auditing {', '.join(record.nodes)}")
        report = _audit(hosts, manifest, spec.cluster.npus_per_node)
        record.stack = {h.host: h.components for h in report.hosts}
        if report.errors and not options.force:
            reason = "; ".join(f"{f.host}: {f.message}" for f in report.errors[:5])
            record.mark("failed", f"audit found {len(report.errors)} error(s): {reason}")
            raise DapoError(f"audit found {len(report.errors)} error(s) on the chosen nodes (use --force to launch "
                            f"anyway): {reason}")
        record.save()

    if options.break_lock:
        cluster.break_lock(head)
    holder = cluster.acquire_lock(head, run_id)
    if holder is not None:
        record.mark("failed", f"cluster locked by {holder.describe()}")
        hint = (" — its launch died; rerun with --break-lock" if _stale(holder) else
                f"; `dapo-ops stop {holder.run_id}` tears its Ray cluster down and frees the nodes")
        raise DapoError(f"{head.name} is locked by {holder.describe()}{hint}")
    try:
        files = render(spec, nodes, manifest)
        write(files, record.directory / "rendered")
        shutil.copyfile(job_file, record.directory / "job.yaml")
        secrets = {"WANDB_API_KEY": os.environ["WANDB_API_KEY"]} if "wandb" in spec.trainer.loggers and \
            os.environ.get("WANDB_API_KEY") else None
        say("pushing the rendered files")
        for node in nodes:
            prefix = f"nodes/{node.name}/"
            mine = {rel[len(prefix):]: text for rel, text in files.items() if rel.startswith(prefix)}
            cluster.push_files(next(h for h in hosts if h.name == node.name), record.node_dir, mine, secrets)
        record.mark("starting")
        say("stopping Ray leftovers")
        cluster.ray_stop(hosts, ray)
        say(f"starting the Ray head on {head.name}")
        cluster.start_head(head, record.node_dir, STEP_TIMEOUTS["head"])
        if workers:
            say(f"starting {len(workers)} Ray worker(s)")
            cluster.start_workers(workers, record.node_dir, STEP_TIMEOUTS["workers"])
        say(f"waiting for {len(hosts)} node(s) and {len(hosts) * spec.cluster.npus_per_node} NPU in Ray")
        seen = cluster.wait_for_cluster(head, record.node_dir, f"{nodes[0].env_prefix}/bin/python",
                                        len(hosts), spec.cluster.npus_per_node,
                                        time.monotonic() + STEP_TIMEOUTS["cluster"])
        record.timestamps["ray_up"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        say(f"Ray is up: {seen['alive']} nodes, {seen['npu']:.0f} NPU")
        record.submission_id = f"dapo-{run_id}"
        cluster.submit(head, record.node_dir, record.submission_id, STEP_TIMEOUTS["submit"])
        record.mark("running")
        return record
    except BaseException as exc:
        reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
        say(f"launch failed ({reason}); tearing down")
        cluster.ray_stop(hosts, ray, timeout=30)
        cluster.release_lock(head, run_id)
        record.mark("failed", reason)
        if isinstance(exc, DapoError):
            raise
        if isinstance(exc, KeyboardInterrupt):
            raise DapoError("launch interrupted; what was started has been torn down") from None
        raise


def _stale(holder: cluster.Lock) -> bool:
    """A lock is stale when its launch died before finishing or failed without releasing it (a launched run holds
    the lock after the launching process exits, until `dapo-ops stop`)."""
    import socket

    from dapo_ops.launch.records import RUNS_DIR, TERMINAL, load_run

    if not (RUNS_DIR / holder.run_id / "run.json").exists():
        return False  # another controller's run: nothing here to judge it by
    record = load_run(holder.run_id)
    if record.state in TERMINAL and "ray_up" not in record.timestamps:
        return True
    if record.state in ("created", "starting") and holder.controller == socket.gethostname() and holder.pid:
        try:
            os.kill(holder.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
    return False


def _audit(hosts: list[HostSpec], manifest: StackManifest, npus: int):
    from dapo_ops.audit.analyze import analyze
    from dapo_ops.audit.collect import collect

    raws, _ = collect(hosts, lambda h: npus, manifest.platform["install_path"], timeout=120, max_workers=32)
    return analyze(raws, manifest)


def stop(record: RunRecord, inventory: Inventory, say) -> RunRecord:
    if record.state not in ("starting", "running", "succeeded") and "ray_up" not in record.timestamps:
        raise UsageError(f"run {record.run_id} is {record.state}" + (f" ({record.reason})" if record.reason else "") +
                         ": it holds no Ray cluster, nothing to stop")
    by_name = {h.name: h for h in inventory.hosts}
    missing = [n for n in record.nodes if n not in by_name]
    if missing:
        raise UsageError(f"run {record.run_id}'s nodes {', '.join(missing)} are not in the inventory")
    hosts = [by_name[n] for n in record.nodes]
    head = by_name[record.head]
    from dapo_ops.layout import node_layout

    ray = {h.name: f"{node_layout(h.vars)['stack_env_prefix']}/bin/ray" for h in hosts}
    if record.submission_id:
        say(f"stopping job {record.submission_id}")
        cluster.job_stop(head, ray[head.name], record.dashboard, record.submission_id)
    say(f"stopping Ray on {', '.join(record.nodes)}")
    errors = {h: e for h, e in cluster.ray_stop(hosts, ray).items() if e}
    cluster.release_lock(head, record.run_id)
    if record.state not in ("failed",):
        record.mark("stopped", f"ray not stopped on: {errors}" if errors else None)
    return record
