"""`dapo-ops stop`: stop a run's Ray job and Ray on its nodes, and release its locks on every node."""

from __future__ import annotations

from dapo_ops.errors import DapoError, UsageError
from dapo_ops.inventory import Inventory
from dapo_ops.launch import cluster, teardown
from dapo_ops.launch.archive import console_path, keep_console
from dapo_ops.clock import utc_now
from dapo_ops.launch.records import STOP_REQUESTED, RunRecord
from dapo_ops.model.run import RunState


def stop(record: RunRecord, inventory: Inventory, say) -> RunRecord:
    if RunState.STARTING not in record.timestamps:  # the launch never got as far as touching Ray
        raise UsageError(f"run {record.run_id} is {record.state}" + (f" ({record.reason})" if record.reason else "") +
                         ": it holds no Ray cluster, nothing to stop")
    by_name = {h.name: h for h in inventory.hosts}
    missing = [n for n in record.nodes if n not in by_name]
    if missing:
        raise UsageError(f"run {record.run_id}'s nodes {', '.join(missing)} are not in the inventory")
    hosts = [by_name[n] for n in record.nodes]
    head = by_name[record.head]
    ray = {h.name: h.layout.ray for h in hosts}
    if record.submission_id and record.state == RunState.RUNNING:  # an ended run's job is over (and its head may be down)
        record.timestamps[STOP_REQUESTED] = utc_now()   # a `watch` of the run takes Ray going away for this stop
        record.save()
        keep_console(record, head, say)
        say(f"stopping job {record.submission_id}")
        cluster.job_stop(head, ray[head.name], record.dashboard, record.token_file, record.submission_id)
    elif record.submission_id and not console_path(record).exists():  # ended by itself: Ray may still hold its log
        keep_console(record, head, lambda _: None)
    say(f"stopping Ray on {', '.join(record.nodes)}")
    errors = teardown.tear_down(hosts, record.run_id, record.node_dir, teardown.stop_timeout(hosts))
    if errors:  # those nodes keep the lock, the token and the firewall table: a later stop finishes the job
        record.mark(record.state, teardown.left_on(errors, record.run_id))
        raise DapoError(teardown.left_on(errors, record.run_id))
    if record.state not in (RunState.FAILED, RunState.REHEARSED):
        record.mark(RunState.STOPPED)
    return record
