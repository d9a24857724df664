"""`dapo-ops audit`."""

from __future__ import annotations

from pathlib import Path

import click

from dapo_ops.cli.options import inventory_option, json_option, limit_option, require_positive
from dapo_ops.cli.output import Output
from dapo_ops.errors import DapoError, UsageError
from dapo_ops.model.variables import NPUS_PER_NODE


@click.command()
@inventory_option
@limit_option
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
@click.option("--npus-per-node", type=int, help=f"NPUs expected per node (default: the inventory's {NPUS_PER_NODE}).")
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
    require_positive(timeout=timeout, max_parallel=max_parallel, npus_per_node=npus_per_node,
                     connect_timeout=connect_timeout)
    report = audit_run.run(
        out, inventory=inventory, limit=limit, from_bundle=from_bundle, bundle_out=bundle_out, timeout=timeout,
        connect_timeout=connect_timeout, max_parallel=max_parallel, npus_per_node=npus_per_node,
        temp_threshold=temp_threshold, hbm_threshold=hbm_threshold, prometheus=prometheus)
    if report.errors or report.interrupted:
        raise DapoError(f"audit found {len(report.errors)} error(s)" +
                        (" (interrupted: partial results)" if report.interrupted else ""))
