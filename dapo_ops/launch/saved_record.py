"""A run's saved steps as `status` and `watch` keep them in its record (`runs` shows the last complete one), and
what `watch` removes of them (dapo_ops/launch/saved_steps.py reads and decides)."""

from __future__ import annotations

from dapo_ops.clock import utc_now
from dapo_ops.launch.records import RunRecord
from dapo_ops.launch.saved_steps import describe, last_complete, prune_others, read_saved_steps


def check_saved_steps(record: RunRecord, by_name: dict) -> str:
    """The run's saved steps read on its nodes now, recorded in the run (`runs` shows them), as one line."""
    steps, unread = read_saved_steps([by_name[n] for n in record.nodes], record.checkpoint_root, record.world_size)
    return record_saved(record, steps, unread)


def record_saved(record: RunRecord, steps: list, unread: dict) -> str:
    """What `steps` say of the run as one line, kept in its record."""
    last = last_complete(steps)
    said = describe(steps)
    if unread:
        said = (f"not known while {', '.join(sorted(unread))} cannot be read ("
                + "; ".join(unread.values()) + f"): the run's other nodes show {said}")
    record.saved = {"last_complete": last.step if last else None, "checked": utc_now(), "said": said,
                    "holders": {node: ranks for node, ranks in last.holders.items()} if last else {}}
    record.save()
    return said


# watch reads the checkpoints every so many checks (one more SSH command per node): to show the last complete step
# in `runs` and to remove what verl leaves on nodes other than rank 0's
TEND_EVERY = 6


def tend_checkpoints(record: RunRecord, by_name: dict, say) -> None:
    """Read the run's steps on every node, keep the result in its record, and remove the older steps' shards."""
    steps, removed = prune_others([by_name[n] for n in record.nodes], record.checkpoint_root, record.world_size,
                                  record.checkpoint_keep)
    record_saved(record, steps, {})
    for node, numbers in sorted(removed.items()):
        say(f"{node}: removed the shards of step(s) {', '.join(map(str, numbers))}, older than the "
            f"{record.checkpoint_keep} complete step(s) kept (verl prunes on rank 0's node only)")
