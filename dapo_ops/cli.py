"""The `dapo-ops` command. Typed errors become exit codes here, and only here:

0 ok; 1 what was checked or run failed; 2 bad input or usage (nothing changed).
Human output goes through rich (to stderr when --json is given); --json prints one document on stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from dapo_ops import __version__
from dapo_ops.errors import DapoError, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

err_console = Console(stderr=True)


class Output:
    """Where a command speaks: rich for people, one JSON document for machines."""

    def __init__(self, as_json: bool):
        self.as_json = as_json
        self.console = err_console if as_json else Console()

    def info(self, message: str) -> None:
        self.console.print(message, highlight=False, soft_wrap=True)

    def document(self, data: Any) -> None:
        if self.as_json:
            click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
# Declared once: every command that reaches the fleet takes the same inventory option.
inventory_option = click.option("-i", "--inventory", type=click.Path(path_type=Path),
                                help="Ansible inventory (default: inventory/sim).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dapo-ops")
def cli() -> None:
    """Provision Ascend 910B fleets to a pinned stack, audit them, launch verl DAPO jobs."""


# ------------------------------------------------------------------------------------------------------ sim


@cli.group()
def sim() -> None:
    """The simulated Ascend fleet (network namespaces + sshd + emulated npu-smi/hccn_tool/installers)."""


@sim.command("up")
@click.option("--nodes", type=int, default=2, show_default=True, help="Number of nodes.")
@click.option("--npus-per-node", type=int, default=16, show_default=True,
              help="NPUs on each node: 8 models an Atlas 800T A2, 16 an Atlas 200T A2 Box16.")
@click.option("--fault", "faults", multiple=True, metavar="SPEC",
              help="Fault knob NODE[.npuK]:KNOB[=VALUE], repeatable (see `dapo-ops sim faults`).")
@click.option("--provisioned", is_flag=True, help="Start every node with the pinned HDK and CANN installed.")
@json_option
def sim_up(nodes: int, npus_per_node: int, faults: tuple[str, ...], provisioned: bool, as_json: bool) -> None:
    """Bring the simulated fleet up (idempotent)."""
    from dapo_ops.sim.fleet import FleetSpec, SimFleet

    out = Output(as_json)
    spec = FleetSpec(nodes=nodes, npus_per_node=npus_per_node, faults=tuple(faults), provisioned=provisioned)
    fleet = SimFleet(log=lambda m: out.info(f"[dim]{m}[/dim]"))
    SimFleet.validate_spec(spec)
    state = fleet.up(spec)
    status = fleet.status()
    _print_sim_status(out, status)
    if state.up_seconds is not None:
        out.info(f"up in {state.up_seconds:.1f} s; inventory {status['inventory']}")
    out.document(status)


@sim.command("status")
@json_option
def sim_status(as_json: bool) -> None:
    """Show the simulated fleet; exit 1 when it is not (fully) up."""
    from dapo_ops.sim.fleet import SimFleet

    out = Output(as_json)
    status = SimFleet().status()
    _print_sim_status(out, status)
    out.document(status)
    if not status["up"]:
        raise DapoError("the simulated fleet is not up" + (
            f" (leftovers: {status['leftovers']}; run `dapo-ops sim down`)" if status.get("leftovers") else ""))


@sim.command("down")
@json_option
def sim_down(as_json: bool) -> None:
    """Tear the simulated fleet down, leaving no namespace, mount, process or link behind."""
    from dapo_ops.sim.fleet import SimFleet

    out = Output(as_json)
    removed = SimFleet().down()
    out.info(f"removed {len(removed['netns'])} namespace(s), {len(removed['links'])} link(s), "
             f"{len(removed['processes'])} process(es)")
    out.document(removed)


@sim.command("stage")
@click.argument("job_file", type=click.Path(path_type=Path))
@click.option("--skip", multiple=True, metavar="NODE", help="Leave this node without the files (repeatable).")
def sim_stage(job_file: Path, skip: tuple[str, ...]) -> None:
    """Put a job's model config.json and (placeholder) parquet files under /data on the simulated nodes."""
    from dapo_ops.job.spec import load_spec
    from dapo_ops.sim.fleet import SimFleet
    from dapo_ops.sim.stage import job_files

    files = job_files(load_spec(job_file))
    staged = SimFleet().stage(files, tuple(skip))
    Output(False).info(f"staged {len(files)} file(s) on {', '.join(staged) or 'no node'}")


@sim.command("faults")
def sim_faults() -> None:
    """List the fault knobs."""
    from dapo_ops.sim.hwmodel import NODE_KNOBS, NPU_KNOBS

    table = Table(title="fault knobs: --fault NODE[.npuK]:KNOB[=VALUE]")
    for column in ("scope", "knob", "meaning"):
        table.add_column(column)
    for scope, knobs in (("node", NODE_KNOBS), ("npu", NPU_KNOBS)):
        for knob, meaning in knobs.items():
            table.add_row(scope, knob, meaning)
    Console().print(table)


def _print_sim_status(out: Output, status: dict) -> None:
    if not status.get("nodes"):
        out.info("no simulated fleet is up")
        return
    from dapo_ops.sim.hwmodel import product_name

    npus = (status.get("spec") or {}).get("npus_per_node")
    kind = f"{npus} NPU per node ({product_name(npus)}), " if npus else ""
    table = Table(title=f"simulated fleet — {kind}mirror {status['mirror']['url']}")
    for column in ("node", "address", "training network", "namespace", "sshd"):
        table.add_column(column)
    for node in status["nodes"]:
        ok = "[green]up[/green]" if node["sshd"] else "[red]down[/red]"
        table.add_row(node["name"], node["ip"], f"{node.get('data_nic')} {node.get('data_ip')}", node["netns"], ok)
    out.console.print(table)


# ---------------------------------------------------------------------------------------------------- audit


@cli.command()
@inventory_option
@click.option("--limit", metavar="PATTERN", help="Only these hosts: names or glob patterns, comma-separated.")
@json_option
@click.option("--prometheus", type=click.Path(path_type=Path), metavar="FILE",
              help="Write node_exporter textfile metrics to FILE (atomically).")
@click.option("--bundle-out", type=click.Path(path_type=Path), metavar="DIR", help="Save the raw outputs per host.")
@click.option("--from-bundle", type=click.Path(path_type=Path), metavar="DIR",
              help="Audit saved outputs offline instead of connecting to the hosts.")
@click.option("--timeout", type=float, default=120, show_default=True, help="Seconds for one host's collection.")
@click.option("--connect-timeout", type=float, help="Seconds to connect to a host (default: inventory or 10).")
@click.option("--max-parallel", type=int, default=32, show_default=True, help="Hosts collected at the same time.")
@click.option("--temp-threshold", type=int, default=85, show_default=True, help="Warn above this NPU temperature (C).")
@click.option("--hbm-threshold", type=int, default=8192, show_default=True,
              help="Warn when an NPU already uses more HBM than this (MB).")
@click.option("--npus-per-node", type=int, help="NPUs expected per node (default: the inventory's npus_per_node).")
@click.option("--list-facts", is_flag=True, help="List the facts collected and their bundle file names, then exit.")
def audit(inventory, limit, as_json, prometheus, bundle_out, from_bundle, timeout, connect_timeout, max_parallel,
          temp_threshold, hbm_threshold, npus_per_node, list_facts) -> None:
    """Check a fleet's firmware, driver, CANN and Python stack against the pinned stack and the fleet's majority."""
    from dapo_ops.audit import run as audit_run

    out = Output(as_json)
    if list_facts:
        audit_run.print_facts(out.console)
        return
    if from_bundle and (inventory or bundle_out):
        raise UsageError("--from-bundle audits saved outputs: it takes neither -i nor --bundle-out")
    for name, value in (("--timeout", timeout), ("--max-parallel", max_parallel), ("--npus-per-node", npus_per_node),
                        ("--connect-timeout", connect_timeout)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be positive")
    report = audit_run.run(
        out, inventory=inventory, limit=limit, from_bundle=from_bundle, bundle_out=bundle_out, timeout=timeout,
        connect_timeout=connect_timeout, max_parallel=max_parallel, npus_per_node=npus_per_node,
        temp_threshold=temp_threshold, hbm_threshold=hbm_threshold, prometheus=prometheus)
    if report.errors or report.interrupted:
        raise DapoError(f"audit found {len(report.errors)} error(s)" +
                        (" (interrupted: partial results)" if report.interrupted else ""))


# ------------------------------------------------------------------------------------------- render, validate


def _job_inputs(job_file: Path, inventory: Path | None):
    from dapo_ops.inventory import load_inventory
    from dapo_ops.job.spec import load_spec
    from dapo_ops.manifest import load_manifest

    spec = load_spec(job_file)
    manifest = load_manifest()
    inv = load_inventory(inventory)
    return spec, manifest, inv


def _placed_job(job_file: Path, inventory: Path | None):
    """The spec placed on its inventory hosts (nodes and NPUs per node from the inventory), the manifest, the hosts."""
    from dapo_ops.job.placement import place

    spec, manifest, inv = _job_inputs(job_file, inventory)
    spec, hosts = place(spec, list(inv.hosts))
    return spec, manifest, hosts


@cli.command()
@click.argument("job_file", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Directory for the files (default: runs/render/<job>).")
@inventory_option
@json_option
def render(job_file: Path, output: Path | None, inventory: Path | None, as_json: bool) -> None:
    """Render a job's environment, Ray start, runtime_env and submit files (nothing is written on bad input).

    Each node's HCCL NIC address comes from the inventory's dapo_hccl_ip, else from the node (over SSH)."""
    from dapo_ops.fleet.nic import read_addresses
    from dapo_ops.job.render import pick_nodes, render as render_files, write
    from dapo_ops.job.validate import arithmetic
    from dapo_ops.paths import PROJECT_ROOT

    out = Output(as_json)
    spec, manifest, hosts = _placed_job(job_file, inventory)
    problems = arithmetic(spec, manifest)
    if problems:
        raise UsageError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    nodes = pick_nodes(hosts, manifest, read_addresses(hosts))
    files = render_files(spec, nodes, manifest)
    target = output or PROJECT_ROOT / "runs" / "render" / spec.name
    write(files, target)
    out.info(f"rendered {len(files)} file(s) for {spec.name} ({spec.cluster.nodes} x {spec.cluster.npus_per_node} NPU) "
             f"into {target}")
    out.document({"output": str(target), "files": sorted(files)})


@cli.command()
@click.argument("job_file", type=click.Path(path_type=Path))
@inventory_option
@click.option("--verl-checkout", type=click.Path(path_type=Path),
              help="A verl checkout at the pinned tag to take the recipe's configuration from.")
@click.option("--recipe-from-head", is_flag=True,
              help="Take the recipe's configuration from the head node's verl checkout (over SSH).")
@json_option
def validate(job_file: Path, inventory: Path | None, verl_checkout: Path | None, recipe_from_head: bool,
             as_json: bool) -> None:
    """Check a job offline: verl's real config with the overrides, the arithmetic, an HBM estimate."""
    import tempfile

    from dapo_ops.job.validate import config_sources, recipe_from_head as head_recipe, validate as validate_job

    out = Output(as_json)
    if verl_checkout and recipe_from_head:
        raise UsageError("--verl-checkout and --recipe-from-head are two sources for the same files: pick one")
    spec, manifest, hosts = _placed_job(job_file, inventory)
    with tempfile.TemporaryDirectory(prefix="dapo-ops-recipe-") as workdir:
        if recipe_from_head:
            sources = head_recipe(hosts[0], manifest, Path(workdir))
        else:
            sources = config_sources(verl_checkout, manifest)
        result = validate_job(spec, manifest, sources)
    hbm = result.hbm
    out.info(f"HBM per NPU (estimate): actor {hbm['actor_gib']:.1f} GiB, reference {hbm['reference_gib']:.1f} GiB, "
             f"rollout {hbm['rollout_budget_gib']:.1f} GiB budget ({hbm['rollout_weights_gib']:.1f} GiB weights, KV "
             f"cache for {hbm['rollout_full_sequences']:.1f} full-length sequences) of {hbm['hbm_gib']:.0f} GiB")
    for warning in result.warnings:
        out.info(f"[yellow]warning:[/yellow] {warning}")
    out.document({"job": spec.name, "nodes": spec.cluster.nodes, "npus_per_node": spec.cluster.npus_per_node,
                  "errors": result.errors, "warnings": result.warnings, "hbm": hbm})
    if result.errors:
        raise UsageError(result.errors[0] + (f" (and {len(result.errors) - 1} more)" if len(result.errors) > 1 else ""))
    out.info(f"[green]{spec.name}: valid on {spec.cluster.nodes} x {spec.cluster.npus_per_node} NPU[/green]")


# -------------------------------------------------------------------------------- launch, status, logs, stop


class StepPrinter:
    """Launch steps through rich: a spinner with the running step and its latest note on a terminal, one line per
    step start, note and end otherwise (logs, CI); each step's closing line carries its time."""

    def __init__(self, console: Console):
        self.console = console
        self.live = console.is_terminal
        self.status = None
        self.title = ""

    def __call__(self, kind: str, title: str, text: str | None, seconds: float | None) -> None:
        from rich.markup import escape

        if kind == "start":
            self.title = title
            if self.live:
                self.status = self.console.status(escape(title))
                self.status.start()
            else:
                self.console.print(f"[dim]… {escape(title)}[/dim]", highlight=False, soft_wrap=True)
        elif kind == "note":
            if self.status is not None:
                self.status.update(f"{escape(self.title)} — {escape(text or '')}")
            else:
                self.console.print(f"[dim]  {escape(text or '')}[/dim]", highlight=False, soft_wrap=True)
        else:
            if self.status is not None:
                self.status.stop()
                self.status = None
            mark = "[green]✓[/green]" if kind == "done" else "[red]✗[/red]"
            detail = f" — {escape(text)}" if text else ""
            self.console.print(f"{mark} {escape(title)}{detail} [dim]({seconds:.1f} s)[/dim]", highlight=False,
                               soft_wrap=True)


@cli.command()
@click.argument("job_file", type=click.Path(path_type=Path))
@click.option("--nodes", type=int, required=True, help="How many inventory nodes to run on (the head first).")
@inventory_option
@click.option("--rehearse-only", is_flag=True,
              help="Bring Ray up, run the rehearsal, tear Ray down again; submit nothing.")
@click.option("--no-audit", is_flag=True, help="Skip the audit gate.")
@click.option("--force", is_flag=True, help="Launch even when the audit finds errors.")
@click.option("--break-lock", is_flag=True, help="Remove a stale cluster lock left by a dead launch first.")
@json_option
def launch(job_file: Path, nodes: int, inventory: Path | None, rehearse_only: bool, no_audit: bool, force: bool,
           break_lock: bool, as_json: bool) -> None:
    """Audit the nodes, lock the cluster, push the rendered files, bring Ray up, rehearse, submit the DAPO job."""
    from dapo_ops.launch.launch import LaunchOptions, launch as launch_job
    from dapo_ops.launch.steps import Steps

    out = Output(as_json)
    if nodes <= 0:
        raise UsageError("--nodes must be positive")
    spec, manifest, inv = _job_inputs(job_file, inventory)
    options = LaunchOptions(nodes, no_audit=no_audit, force=force, break_lock=break_lock, rehearse_only=rehearse_only)
    record = launch_job(spec, job_file, inv, manifest, options, Steps(StepPrinter(out.console)))
    if record.state == "rehearsed":
        out.info(f"[green]{record.run_id}[/green]: rehearsal passed on {', '.join(record.nodes)}; Ray stopped, "
                 "nothing submitted")
    else:
        out.info(f"[green]{record.run_id}[/green]: submitted as {record.submission_id} on {record.head}; follow it "
                 f"with `dapo-ops logs {record.run_id} --follow`")
    out.document(_record_dict(record))


def _record_dict(record) -> dict:
    import dataclasses

    return dataclasses.asdict(record)


def _run_context(run: str | None, inventory: Path | None):
    from dapo_ops.inventory import load_inventory
    from dapo_ops.launch.records import latest_run, load_run

    record = load_run(run) if run else latest_run()
    inv = load_inventory(inventory)
    by_name = {h.name: h for h in inv.hosts}
    if record.head not in by_name:
        raise UsageError(f"run {record.run_id}'s head {record.head} is not in the inventory")
    return record, inv, by_name[record.head]


@cli.command()
@click.argument("run", required=False)
@inventory_option
@json_option
def status(run: str | None, inventory: Path | None, as_json: bool) -> None:
    """The state of a run (default: the latest), asking Ray on the head."""
    from dapo_ops.launch import cluster
    from dapo_ops.layout import node_layout

    out = Output(as_json)
    record, _, head = _run_context(run, inventory)
    job = None
    if record.submission_id and record.state in ("running", "succeeded"):
        job = cluster.job_status(head, node_layout(head.vars)["stack_env_ray"], record.dashboard,
                                 record.submission_id)
        if job in ("SUCCEEDED", "FAILED", "STOPPED") and record.state == "running":
            record.mark({"SUCCEEDED": "succeeded", "FAILED": "failed", "STOPPED": "stopped"}[job],
                        None if job == "SUCCEEDED" else f"Ray reports the job {job}")
    out.info(f"{record.run_id}: {record.state}" + (f" (Ray job {record.submission_id}: {job})" if job else "") +
             (f" — {record.reason}" if record.reason else ""))
    out.document(dict(_record_dict(record), ray_job_status=job))
    if record.state == "failed":
        raise DapoError(f"run {record.run_id} failed: {record.reason}")


@cli.command()
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep streaming until the job ends.")
@inventory_option
def logs(run: str, follow: bool, inventory: Path | None) -> None:
    """The driver log of a run's job."""
    from dapo_ops.launch import cluster
    from dapo_ops.layout import node_layout

    record, _, head = _run_context(run, inventory)
    if not record.submission_id:
        raise UsageError(f"run {record.run_id} was never submitted ({record.state}: {record.reason})")
    cluster.job_logs(head, node_layout(head.vars)["stack_env_ray"], record.dashboard,
                     record.submission_id, follow, sys.stdout)


@cli.command()
@click.argument("run")
@inventory_option
@json_option
def stop(run: str, inventory: Path | None, as_json: bool) -> None:
    """Stop a run's job, stop Ray on its nodes, release the cluster lock."""
    from dapo_ops.launch.launch import stop as stop_run

    out = Output(as_json)
    record, inv, _ = _run_context(run, inventory)
    record = stop_run(record, inv, say=lambda m: out.info(f"[dim]{m}[/dim]"))
    out.info(f"{record.run_id}: {record.state}")
    out.document(_record_dict(record))


@cli.command()
@json_option
def runs(as_json: bool) -> None:
    """The runs this controller launched."""
    from dapo_ops.launch.records import all_runs

    out = Output(as_json)
    records = all_runs()
    from rich import box

    table = Table(title="runs", box=box.SIMPLE_HEAD, padding=(0, 1))
    rows = [(r.state, r.run_id, ",".join(r.nodes), r.reason or "") for r in records]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(3)]
    for index, name in enumerate(("state", "run", "nodes")):  # never shortened: the reason gives way
        table.add_column(name, no_wrap=True, min_width=max(widths[index], len(name)))
    # what is left of the line (rich drops no_wrap columns that do not fit); `runs --json` has the whole reason
    left = out.console.width - sum(max(w, 5) for w in widths) - 4 * 2 - 2
    table.add_column("reason", no_wrap=True, overflow="ellipsis", max_width=max(left, 6))
    for row in rows:
        table.add_row(*row)
    if not as_json:
        out.console.print(table)
    out.document([_record_dict(r) for r in records])


# ---------------------------------------------------------------------------------------------------- stack


@cli.group()
def stack() -> None:
    """The nodes' locked Python stack (stack/lock, named by the manifest's `lock:`)."""


@stack.command("lock")
@click.option("--sources", type=click.Path(file_okay=False, path_type=Path),
              help="Directory with checkouts of vLLM, vllm-ascend and verl at their pinned commits (sources.*.dir): "
                   "re-record the layer requirements from them first.")
@click.option("--platform", "platforms", multiple=True, metavar="NAME",
              help="Node platform to resolve (repeatable; default: every platform in force).")
@click.option("--check", "check_only", is_flag=True,
              help="Offline: prove the lock, the manifest and the recorded layer requirements agree (no uv call).")
@click.option("--upgrade", is_flag=True, help="Resolve afresh instead of keeping the locked versions that still fit.")
@click.option("--unverified", multiple=True, metavar="SOURCE=HOW",
              help="Record a layer from a directory that is not a git checkout (its commit cannot be verified); "
                   "HOW says where the file came from and is written in the recorded header.")
@click.option("--lock-dir", type=click.Path(file_okay=False, path_type=Path), help="Lock directory (default: lock.dir).")
@click.option("--manifest", "manifest_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Stack manifest (default: stack/manifest.yml).")
def stack_lock(sources: Path | None, platforms: tuple[str, ...], check_only: bool, upgrade: bool,
               unverified: tuple[str, ...], lock_dir: Path | None, manifest_path: Path | None) -> None:
    """Regenerate the lock with uv and show what changed, or --check it offline."""
    from rich import box

    from dapo_ops.manifest import load_manifest
    from dapo_ops.stack import lockgen
    from dapo_ops.stack.lock import diff_locks, parse_lock

    out = Output(False)
    manifest = load_manifest(manifest_path)
    directory = lockgen.lock_dir(manifest, lock_dir)
    config = manifest.lock
    if check_only:
        if sources or platforms or upgrade or unverified:
            raise UsageError("--check takes no --sources, --platform, --upgrade or --unverified")
        report = lockgen.check(manifest, directory)
        for note in report.notes:
            out.info(f"[dim]note: {note}[/dim]")
        for problem in report.problems:
            err_console.print(problem, highlight=False, soft_wrap=True, markup=False)
        if not report.ok:
            raise DapoError(f"the lock disagrees in {len(report.problems)} place(s)")
        in_force = [p.file for p in config.platforms.values() if p.in_force]
        out.info(f"lock ok: {', '.join(in_force)} {'agrees' if len(in_force) == 1 else 'agree'} with the manifest and "
                 "the layer requirements")
        return
    unknown = [p for p in platforms if p not in config.platforms]
    if unknown:
        raise UsageError(f"--platform {unknown[0]}: the manifest's lock has {', '.join(config.platforms)}")
    notes = {}
    for item in unverified:
        key, sep, how = item.partition("=")
        if not sep or not how.strip():
            raise UsageError(f"--unverified {item!r}: expected SOURCE=HOW")
        notes[key] = how.strip()
    if notes and not sources:
        raise UsageError("--unverified needs --sources")
    directory.mkdir(parents=True, exist_ok=True)
    out.info(f"wrote {lockgen.write_direct(manifest, directory)}")
    if sources:
        for path in lockgen.record_layers(manifest, sources, directory, notes):
            out.info(f"recorded {path}")
    chosen = list(platforms) or [p.name for p in config.platforms.values() if p.in_force]
    for name in chosen:
        spec = config.platforms[name]
        path = directory / spec.file
        old = parse_lock(path.read_text(), str(path)) if path.exists() else {}
        text = lockgen.compile_lock(manifest, name, directory, upgrade)
        new = parse_lock(text, f"new {spec.file}")
        path.write_text(text)
        rows = diff_locks(old, new)
        table = Table(title=f"{spec.file}: {len(new)} packages, {len(rows)} change(s)", box=box.SIMPLE_HEAD)
        for column in ("change", "package", "was", "now"):
            table.add_column(column, no_wrap=True)
        for row in rows:
            table.add_row(*row)
        out.console.print(table)
        if not spec.in_force:
            out.info(f"{name}: the manifest does not put this lock in force yet ({spec.reason})")


@stack.command("wheelhouse")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--platform", "arch", type=click.Choice(["aarch64", "x86_64"]), default="aarch64", show_default=True,
              help="Node platform: its manylinux wheels for the manifest's python.version.")
@click.option("--lock", "lock_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Lock file (default: the manifest's lock for the platform).")
@click.option("--only", multiple=True, metavar="NAME", help="Only this locked package (repeatable).")
@json_option
def stack_wheelhouse(directory: Path, arch: str, lock_path: Path | None, only: tuple[str, ...], as_json: bool) -> None:
    """Download every locked file for a node platform, sha256-checked, into DIR/files with a PEP 503 index in
    DIR/simple (serve DIR over HTTP, or use file://DIR/simple, as dapo_pip_index_url). Twice downloads nothing."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dapo_ops.manifest import load_manifest
    from dapo_ops.paths import PROJECT_ROOT
    from dapo_ops.stack import wheelhouse as wh

    out = Output(as_json)
    manifest = load_manifest()
    spec = manifest.lock.platforms.get(arch) if manifest.lock else None
    if lock_path is None:
        if spec is None:
            raise UsageError(f"the manifest names no lock for {arch}; give --lock FILE")
        lock_path = PROJECT_ROOT / manifest.lock.dir / spec.file
    if spec is not None and not spec.in_force:
        out.info(f"[yellow]warning:[/yellow] the {arch} lock is not in force ({escape(spec.reason or '')})")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=as_json or not err_console.is_terminal) as bar:
        task = bar.add_task("checking", total=None)
        summary = wh.build(directory, lock_path, arch, manifest.python_version, only,
                           progress=lambda label, done, total: bar.update(task, description=label, completed=done,
                                                                           total=total),
                           glibc=wh.glibc_max(spec.python_platform if spec else None),
                           index_url=manifest.lock.index_url if manifest.lock else None,
                           extra_index_urls=spec.extra_index_urls if spec else ())
    for warning in summary.warnings:
        out.info(f"[yellow]warning:[/yellow] {escape(warning)}")
    for name in summary.replaced:
        out.info(f"replaced {escape(name)}: its sha256 is not the lock's")
    out.info(f"{escape(str(directory))}: {summary.files} files, {wh.human_size(summary.bytes)} "
             f"({len(summary.downloaded)} downloaded, {summary.kept} of {summary.packages} packages already there); "
             f"index {escape(str(directory / 'simple'))}")
    out.document(summary.as_dict())


# ----------------------------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="dapo-ops", standalone_mode=False)
    except click.exceptions.Abort:
        err_console.print("dapo-ops: interrupted", soft_wrap=True)
        return EXIT_FAILED
    except click.ClickException as exc:
        err_console.print(f"dapo-ops: {exc.format_message()}", highlight=False, soft_wrap=True)
        return EXIT_USAGE if isinstance(exc, click.UsageError) or exc.exit_code == 2 else EXIT_FAILED
    except UsageError as exc:
        err_console.print(f"dapo-ops: {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except DapoError as exc:
        err_console.print(f"dapo-ops: {exc}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("dapo-ops: interrupted", soft_wrap=True)
        return EXIT_FAILED
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Exception as exc:  # the one place a bug becomes a one-line message instead of a traceback
        err_console.print(f"dapo-ops: internal error: {type(exc).__name__}: {exc} "
                          "(set DAPO_OPS_DEBUG=1 for the traceback)", highlight=False)
        if _debug():
            raise
        return EXIT_FAILED
    return EXIT_OK


def _debug() -> bool:
    import os

    return os.environ.get("DAPO_OPS_DEBUG") == "1"


if __name__ == "__main__":
    sys.exit(main())
