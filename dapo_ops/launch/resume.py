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


def plan_resume(record: RunRecord, by_name: dict, say) -> Resume:
    """The step to resume from, read on every node of the run, and whether its storage is shared. UsageError when
    no step is complete, or when a node that alone holds some ranks' shards is not there."""
    resumable(record)
    missing = [n for n in record.nodes if n not in by_name]
    if missing:
        raise UsageError(f"run {record.run_id}'s nodes {', '.join(missing)} are not in the inventory")
    hosts = [by_name[n] for n in record.nodes]
    steps, unread = read_saved_steps(hosts, record.checkpoint_root, record.world_size)
    shared = not unread and is_shared(hosts, record.checkpoint_root)
    last = last_complete(steps)
    if unread and not shared:
        gone = "; ".join(f"{node}: {why}" for node, why in unread.items())
        raise UsageError(f"cannot resume run {record.run_id} from node-local checkpoints while a node of it does not "
                         f"answer ({gone}): its ranks' shards are only there; resume once it is back")
    if last is None:
        raise UsageError(f"run {record.run_id} has no complete checkpoint to resume from ({describe(steps)} under "
                         f"{record.checkpoint_root}): launch it anew")
    say(f"{record.run_id}: {describe(steps)}" + (" (shared storage)" if shared else ""))
    return Resume(previous=record.run_id, chain=record.chain or record.run_id, step=last.step,
                  nodes=tuple(record.nodes), addresses=dict(record.addresses), shared=shared)


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
