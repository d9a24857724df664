"""`dapo-ops render` and `dapo-ops validate`: a job spec checked and rendered offline, placed on the inventory."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from dapo_ops.cli.options import inventory_option, job_file_argument, json_option, model_config_option
from dapo_ops.cli.output import Output
from dapo_ops.errors import UsageError
from dapo_ops.model.variables import HCCL_IP


def placed_job(job_file: Path, inventory: Path | None):
    """The spec placed on its inventory hosts (nodes and NPUs per node from the inventory), the manifest, the hosts."""
    from dapo_ops.inventory import load_inventory
    from dapo_ops.job.placement import place
    from dapo_ops.job.spec import load_spec
    from dapo_ops.manifest import load_manifest

    spec = load_spec(job_file)
    manifest = load_manifest()
    spec, hosts = place(spec, list(load_inventory(inventory).hosts))
    return spec, manifest, hosts


def placed_offline(job_file: Path, inventory: Path | None):
    """As placed_job; but with no inventory given or configured, a spec that pins cluster.npus_per_node is checked
    on its own numbers (validate needs no node)."""
    from dapo_ops.errors import InventoryError
    from dapo_ops.job.spec import load_spec
    from dapo_ops.manifest import load_manifest
    from dapo_ops.inventory import NoHosts, configured_inventory

    if inventory is not None:
        return placed_job(job_file, inventory)
    spec = load_spec(job_file)
    if configured_inventory() is not None:
        try:
            return placed_job(job_file, inventory)
        except NoHosts:   # a configured inventory with no hosts (a fleet brought down): the spec's own numbers
            if spec.cluster.npus_per_node is None:
                raise
    if spec.cluster.npus_per_node is None:
        raise InventoryError("no inventory to place the job on (none given or configured): pass -i INVENTORY, "
                             "or set cluster.npus_per_node in the spec to validate it on its own numbers")
    return spec, load_manifest(), []


def first_of(problems: list[str]) -> str:
    return problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")


@click.command()
@job_file_argument
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Directory for the files (default: runs/render/<job>).")
@inventory_option
@model_config_option
@json_option
def render(job_file: Path, output: Path | None, inventory: Path | None, model_config: Path | None,
           as_json: bool) -> None:
    """Render a job's environment, Ray start, runtime_env and submit files (nothing is written on bad input).

    It reaches no node: each node's HCCL NIC address is the inventory's HCCL_IP, else the scripts read it on the
    node when they start (launch reads every address before any change)."""
    from dapo_ops.fleet.nic import hccl_nic, inventory_address
    from dapo_ops.job.render import pick_nodes, render as render_files, write
    from dapo_ops.job.validate import arithmetic
    from dapo_ops.paths import PROJECT_ROOT

    out = Output(as_json)
    from dapo_ops.job.model_facts import model_facts, with_facts

    spec, manifest, hosts = placed_job(job_file, inventory)
    problems = arithmetic(with_facts(spec, model_facts(spec, None, model_config)), manifest)
    if problems:
        raise UsageError(first_of(problems))
    for host in hosts:
        hccl_nic(host)                          # a missing or malformed NIC name is an inventory error here too
    addresses = {host.name: inventory_address(host) for host in hosts}
    nodes = pick_nodes(hosts, manifest, addresses)
    files = render_files(spec, nodes, manifest)
    unknown = [name for name, address in addresses.items() if address is None]
    if unknown:
        out.info(f"no {HCCL_IP} for {', '.join(unknown)}: each node's scripts read its NIC's address when they "
                 "start; a worker's head address and the run's firewall need them all (`dapo-ops launch` reads them)")
    target = output or PROJECT_ROOT / "runs" / "render" / spec.name
    write(files, target)
    out.info(f"rendered {len(files)} file(s) for {spec.name} ({spec.cluster.nodes} x {spec.cluster.npus_per_node} NPU) "
             f"into {target}")
    out.document({"output": str(target), "files": sorted(files)})


@click.command()
@job_file_argument
@inventory_option
@click.option("--verl-checkout", type=click.Path(path_type=Path),
              help="A verl checkout at the pinned tag to take the recipe's configuration from.")
@click.option("--recipe-from-head", is_flag=True,
              help="Take the recipe's configuration from the head node's verl checkout (over SSH).")
@model_config_option
@json_option
def validate(job_file: Path, inventory: Path | None, verl_checkout: Path | None, recipe_from_head: bool,
             model_config: Path | None, as_json: bool) -> None:
    """Check a job offline: verl's real config with the overrides, the arithmetic, an HBM estimate."""
    from dapo_ops.job.validate import config_sources, recipe_from_head as head_recipe, validate as validate_job

    out = Output(as_json)
    if verl_checkout and recipe_from_head:
        raise UsageError("--verl-checkout and --recipe-from-head are two sources for the same files: pick one")
    spec, manifest, hosts = placed_offline(job_file, inventory)
    if recipe_from_head and not hosts:
        raise UsageError("--recipe-from-head reads the head node's checkout: pass -i INVENTORY")
    with tempfile.TemporaryDirectory(prefix="dapo-ops-recipe-") as workdir:
        if recipe_from_head:
            sources = head_recipe(hosts[0], manifest, Path(workdir))
        else:
            sources = config_sources(verl_checkout, manifest)
        result = validate_job(spec, manifest, sources, model_config)
    hbm, host = result.hbm, result.host
    out.info(f"HBM per NPU (estimate): actor update {hbm['actor_update_gib']:.1f} GiB, actor log-prob "
             f"{hbm['actor_log_prob_gib']:.1f} GiB, reference log-prob {hbm['reference_log_prob_gib']:.1f} GiB, "
             f"rollout {hbm['rollout_budget_gib']:.1f} GiB budget ({hbm['rollout_weights_gib']:.1f} GiB weights, KV "
             f"cache for {hbm['rollout_full_sequences']:.1f} full-length sequences) of {hbm['hbm_gib']:.0f} GiB")
    out.info(f"host memory per node (estimate): {host['host_mem_gib']:.0f} GiB (offloaded actor shards "
             f"{host['host_actor_params_gib']:.0f}, Adam states {host['host_actor_optimizer_gib']:.0f}, reference "
             f"{host['host_reference_params_gib']:.0f}, vLLM's sleeping weights {host['host_rollout_weights_gib']:.0f}, "
             f"processes {host['host_runtime_gib']:.0f}; start-up model load {host['host_model_load_gib']:.0f})")
    checkpoint, saving = result.checkpoint, result.saving
    out.info(f"checkpoint per node (estimate): {checkpoint['checkpoint_node_gib']:.0f} GiB per saved step (each "
             f"rank's fp32 actor shard and AdamW state, {checkpoint['checkpoint_rank_gib']:.1f} GiB)"
             + (f"; {saving.describe()}" if saving else ""))
    if saving:
        checkpoint = {**checkpoint, **saving.as_json()}
    for warning in result.warnings:
        out.warning(warning)
    out.document({"job": spec.name, "nodes": spec.cluster.nodes, "npus_per_node": spec.cluster.npus_per_node,
                  "errors": result.errors, "warnings": result.warnings, "hbm": hbm, "host_memory": host,
                  "host_mem_gib": host["host_mem_gib"], "checkpoint": checkpoint})
    if result.errors:
        raise UsageError(first_of(result.errors))
    out.success(f"{spec.name}: valid on {spec.cluster.nodes} x {spec.cluster.npus_per_node} NPU")
