"""The audit command's edge: inventory, SSH collection with progress, bundles, outputs."""

from __future__ import annotations

import dataclasses
import fnmatch
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from dapo_ops.audit import collect as collect_mod
from dapo_ops.audit.analyze import analyze
from dapo_ops.audit.fact import all_facts
from dapo_ops.audit.model import AuditReport, Thresholds
from dapo_ops.audit.report import print_report, prometheus_text
from dapo_ops.files import write_atomically
from dapo_ops.errors import UsageError
from dapo_ops.inventory import load_inventory
from dapo_ops.manifest import load_manifest


def select(names: list[str], limit: str | None) -> list[str]:
    if not limit:
        return names
    patterns = [p.strip() for p in limit.split(",") if p.strip()]
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not chosen:
        raise UsageError(f"--limit {limit!r} matches no host (hosts: {', '.join(names)})")
    return chosen


def print_facts(console: Console) -> None:
    table = Table(title="audit facts (bundle file: HOST/<fact>.txt, per-NPU facts HOST/<fact>.<npu>.txt)")
    for column in ("fact", "per NPU", "description"):
        table.add_column(column)
    for fact in all_facts().values():
        table.add_row(fact.name, "yes" if fact.per_npu else "", fact.description)
    console.print(table)


def run(out, *, inventory, limit, from_bundle, bundle_out, timeout, connect_timeout, max_parallel, npus_per_node,
        temp_threshold, hbm_threshold, prometheus) -> AuditReport:
    manifest = load_manifest()
    install_path = manifest.platform["install_path"]
    interrupted = False
    if from_bundle:
        raws = collect_mod.read_bundle(Path(from_bundle), npus_per_node)
        wanted = set(select([r.host for r in raws], limit))
        raws = [r for r in raws if r.host in wanted]
    else:
        inv = load_inventory(inventory)
        inv = inv.limit(select(inv.names(), limit))
        hosts = list(inv.hosts)
        if connect_timeout:
            hosts = [dataclasses.replace(h, connect_timeout=connect_timeout) for h in hosts]
        npus = {host.name: npus_per_node or host.npus for host in hosts}
        with Progress(TextColumn("auditing"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                      TimeElapsedColumn(), console=Console(stderr=True), transient=True,
                      disable=out.as_json or not Console(stderr=True).is_terminal) as progress:
            task = progress.add_task("", total=len(hosts))

            def done(raw):
                progress.update(task, advance=1, description=raw.host)

            raws, interrupted = collect_mod.collect(hosts, lambda h: npus[h.name], install_path, timeout,
                                                    max_parallel, on_done=done)
        if bundle_out:
            collect_mod.write_bundle(Path(bundle_out), raws)
    report = analyze(raws, manifest, Thresholds(temp_c=temp_threshold, hbm_used_mb=hbm_threshold), interrupted)
    if prometheus:
        write_atomically(Path(prometheus), prometheus_text(report, manifest))
    if out.as_json:
        out.document(report.to_dict())
    else:
        print_report(report, manifest, out.console)
    return report
