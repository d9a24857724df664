"""`dapo-ops launch --resume RUN`: the run's job again, from its last step that is complete on every node.

The same spec (the run's own copy of it), the same nodes and the same checkpoint chain; a new run id, linked to the
attempt it resumes. verl keeps each rank's shard on the node that wrote it and cannot reshard (a resume needs the same
world size), and it gives ranks to nodes in the order of their Ray addresses as strings (verl v0.7.0
verl/single_controller/ray/base.py sort_placement_group_by_node_ip: "requires RANK to be consistent across nodes
when resume from checkpoint"). On node-local storage a resume therefore needs the same nodes at the same addresses;
on storage every node shares, the shards are wherever the job runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dapo_ops.errors import UsageError
from dapo_ops.fleet.shared_dir import is_shared
from dapo_ops.launch.records import RunRecord
from dapo_ops.launch.saved_steps import describe, last_complete, read_saved_steps
from dapo_ops.model.run import IN_FLIGHT, RunState


@dataclass(frozen=True)
class Resume:
    previous: str                     # the run id of the attempt resumed
    chain: str                        # the first attempt's run id: the chain's checkpoint directory
    step: int                         # the last complete step: the new attempt starts at step + 1
    nodes: tuple[str, ...]            # the previous attempt's nodes, its head first
    addresses: dict[str, str] = field(default_factory=dict)   # node -> Ray address, to keep on node-local storage
    shared: bool = False              # the checkpoint directory is one filesystem every node sees


def resumable(record: RunRecord) -> None:
    """UsageError unless the run is an attempt that ended without finishing, with a checkpoint chain."""
    if record.state in IN_FLIGHT or record.state == RunState.RUNNING:
        raise UsageError(f"run {record.run_id} is {record.state}: stop it first (dapo-ops stop {record.run_id})")
    if record.state == RunState.SUCCEEDED:
        raise UsageError(f"run {record.run_id} succeeded: there is nothing left to resume")
    if record.state == RunState.REHEARSED or not record.submission_id:
        raise UsageError(f"run {record.run_id} never submitted its job ({record.state}): launch it anew")
    if not record.checkpoint_root or not record.world_size:
        raise UsageError(f"run {record.run_id} records no checkpoint directory (launched by an older dapo-ops): "
                         "resume it by hand with trainer.resume_mode=resume_path")


def answering(hosts: list) -> list:
    """The hosts that answer over SSH now (with their verified host keys), in their order."""
    from dapo_ops.fleet.ssh import QUICK, fan_out, run_on

    results = fan_out(hosts, lambda host: run_on(host, "true", timeout=QUICK)).results
    return [h for h in hosts if h.name in results and results[h.name].failure is None]


def spares_for(record: RunRecord, inventory_hosts: list, count: int, npus: int) -> list:
    """Up to `count` inventory nodes outside the run, with the run's NPUs per node, that answer now."""
    candidates = [h for h in inventory_hosts if h.name not in record.nodes and h.npus == npus]
    return answering(candidates)[:count] if count and candidates else []


def plan_resume(record: RunRecord, by_name: dict, say) -> Resume:
    """The step to resume from, read on every node of the run, and its nodes: the same ones, or, on storage all
    nodes share, spare inventory nodes in place of those that are gone. UsageError when no step is complete, or
    when a node that alone holds some ranks' shards is not there."""
    resumable(record)
    present = [by_name[n] for n in record.nodes if n in by_name]
    steps, unread = read_saved_steps(present, record.checkpoint_root, record.world_size)
    gone = {n: "not in the inventory" for n in record.nodes if n not in by_name} | unread
    here = [h for h in present if h.name not in unread]
    shared = record.checkpoint_shared
    if shared is None:   # not recorded (checkpoints off at launch): told now, by the nodes that answer
        shared = len(here) > 1 and is_shared(here, record.checkpoint_root)
    nodes = [h.name for h in here]
    if gone and not shared:
        why = "; ".join(f"{node}: {reason}" for node, reason in gone.items())
        raise UsageError(f"cannot resume run {record.run_id} from node-local checkpoints while a node of it is gone "
                         f"({why}): its ranks' shards are only there; resume once it is back")
    if gone:
        npus = record.world_size // len(record.nodes)
        spares = spares_for(record, list(by_name.values()), len(gone), npus)
        if len(spares) < len(gone):
            raise UsageError(f"cannot resume run {record.run_id}: {', '.join(gone)} gone and "
                             f"{len(spares)} spare node(s) with {npus} NPUs answering in the inventory")
        say(f"{', '.join(gone)} gone: the checkpoints are on shared storage, so {', '.join(h.name for h in spares)} "
            "take(s) their place")
        nodes += [h.name for h in spares]
    last = last_complete(steps)
    if last is None:
        raise UsageError(f"run {record.run_id} has no complete checkpoint to resume from ({describe(steps)} under "
                         f"{record.checkpoint_root}): launch it anew")
    say(f"{record.run_id}: {describe(steps)}" + (" (shared storage)" if shared else ""))
    return Resume(previous=record.run_id, chain=record.chain or record.run_id, step=last.step,
                  nodes=tuple(nodes), addresses=dict(record.addresses), shared=bool(shared))


def moved_ranks(resume: Resume, addresses: dict[str, str]) -> str | None:
    """On node-local storage, why the ranks would land on other nodes than the ones holding their shards (a node's
    Ray address changed, so verl's order by address is another), or None."""
    if resume.shared:
        return None
    changed = [f"{node} {resume.addresses.get(node)} -> {addresses.get(node)}" for node in resume.nodes
               if resume.addresses.get(node) != addresses.get(node)]
    if not changed:
        return None
    return (f"the nodes' Ray addresses changed since step {resume.step} was saved ({', '.join(changed)}): verl gives "
            "ranks to nodes in the order of their addresses, so ranks would load other ranks' shards")


def clear_previous(record: RunRecord, inventory, say) -> None:
    """Stop what the attempt left (Ray and its lock on a node that was cut off), as `dapo-ops stop` does, before the
    next attempt takes the nodes; a node still gone keeps them, which the next attempt, without it, can live with."""
    from dapo_ops.errors import DapoError
    from dapo_ops.launch.stop import stop

    try:
        stop(record, inventory, say)
    except DapoError as exc:
        say(f"{exc}")
