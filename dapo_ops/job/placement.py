"""Which inventory hosts a job runs on, and how many NPUs each gives it (pure).

NPUs per node are a property of the hardware, not of the job: an Atlas 800T A2 has 8 NPUs (vllm-ascend v0.11.0rc1
docs/source/tutorials/multi_node.md: "two Atlas 800 A2 (64G*8) nodes"), while verl runs its 16-per-node DAPO NPU
recipes on Atlas 200T A2 Box16 (verl v0.7.0 docs/ascend_tutorial/ascend_quick_start.rst). So the number comes from
the inventory's `NPUS_PER_NODE` of the chosen hosts (which preflight and the audit check against what the node
reports); a spec may pin `cluster.npus_per_node`, and then the two must agree.
"""

from __future__ import annotations

import dataclasses

from dapo_ops.errors import InventoryError
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.inventory import NPUS_VAR
from dapo_ops.job.spec import JobSpec, SpecError
from dapo_ops.ray_ports import INVENTORY_VAR as RAY_PORTS_VAR, RayPorts, ray_ports, with_defaults

def job_hosts(spec: JobSpec, hosts: list[HostSpec], nodes: int | None = None) -> list[HostSpec]:
    """The job's hosts in rank order: the head (cluster.head, else the first host), then the others in inventory
    order, `nodes` (default cluster.nodes) of them."""
    count = spec.cluster.nodes if nodes is None else nodes
    if count < 1:
        raise SpecError(f"{'cluster.nodes' if nodes is None else '--nodes'} is {count}; it must be a positive number")
    names = [h.name for h in hosts]
    head = spec.cluster.head or (names[0] if names else None)
    if head not in names:
        raise SpecError(f"cluster.head: {head!r} is not in the inventory ({', '.join(names) or 'no hosts'})")
    if len(hosts) < count:
        raise InventoryError(f"the job needs {count} node(s) but the inventory has {len(hosts)}: lower "
                             "cluster.nodes (or --nodes) or add nodes to the inventory")
    # the head first (Ray's head, verl's rank 0), then the others in inventory order
    ordered = [h for h in hosts if h.name == head] + [h for h in hosts if h.name != head]
    return ordered[:count]


def place(spec: JobSpec, hosts: list[HostSpec], nodes: int | None = None) -> tuple[JobSpec, list[HostSpec]]:
    """The spec with cluster.nodes and cluster.npus_per_node taken from the chosen hosts, and those hosts.

    Every chosen host must give the same number of NPUs (verl's resource pool is nodes x n_gpus_per_node); a spec
    that pins npus_per_node must match them."""
    from dapo_ops.inventory_checks import job_host_problems  # it reads the launch module's backends

    chosen = job_hosts(spec, hosts, nodes)
    job_host_problems(chosen)
    counts = {h.name: h.npus for h in chosen}
    distinct = sorted(set(counts.values()))
    if len(distinct) > 1:
        listed = ", ".join(f"{name} {n}" for name, n in counts.items())
        raise InventoryError(f"the job's nodes declare different {NPUS_VAR} ({listed}); verl needs the same "
                             "number on every node: pick nodes of one kind")
    npus = distinct[0]
    pinned = spec.cluster.npus_per_node
    if pinned is not None and pinned != npus:
        raise SpecError(f"cluster.npus_per_node is {pinned} but the inventory declares {NPUS_VAR} {npus} for "
                        f"{', '.join(counts)}: remove cluster.npus_per_node to take it from the inventory")
    ports = job_ray_ports(spec, chosen)
    cluster = dataclasses.replace(spec.cluster, nodes=len(chosen), npus_per_node=npus, ray_port=ports["gcs"],
                                  dashboard_port=ports["dashboard"])
    return dataclasses.replace(spec, cluster=cluster), chosen


def job_ray_ports(spec: JobSpec, hosts: list[HostSpec]) -> RayPorts:
    """The Ray ports of the job's nodes: one map for all of them (RAY_PORTS; the spec's cluster.ray_port and
    cluster.dashboard_port win for gcs and dashboard)."""
    maps = {h.name: with_defaults(h.vars.get(RAY_PORTS_VAR), f"{h.name}: {RAY_PORTS_VAR}") for h in hosts}
    first = hosts[0].name
    differ = [name for name, ports in maps.items() if ports != maps[first]]
    if differ:
        raise InventoryError(f"{RAY_PORTS_VAR} differs between {first} and {', '.join(differ)}: every node of a "
                             "Ray cluster uses the same ports (set it once, for the group)")
    return ray_ports(hosts[0].vars.get(RAY_PORTS_VAR), gcs=spec.cluster.ray_port, dashboard=spec.cluster.dashboard_port)


def world_size(spec: JobSpec) -> int:
    """nodes x NPUs per node of a placed spec."""
    if spec.cluster.npus_per_node is None:
        raise SpecError("cluster.npus_per_node is not known: place the job on the inventory first")
    return spec.cluster.nodes * spec.cluster.npus_per_node
