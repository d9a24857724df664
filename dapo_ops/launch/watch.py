"""Watching a running run (`dapo-ops status` and `dapo-ops watch`): every node of the run answers over SSH, Ray
counts it alive, and its NPUs are healthy and all there. A node that fails any of these is lost: the run is recorded
as failed naming it, and (`--on-node-loss stop`, the default) the job and Ray are stopped on the rest, which frees
their locks. Without this a lost worker stays invisible until HCCL's timeouts fail the job, up to an hour later."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field

from dapo_ops.ascend.npu_smi import parse_npu_smi_info
from dapo_ops.errors import DapoError
from dapo_ops.fleet.ssh import HostSpec, PROBE, fan_out, run_on
from dapo_ops.job.render import firewall_table
from dapo_ops.launch import cluster, locks, teardown
from dapo_ops.launch.archive import keep_console
from dapo_ops.launch.records import STOP_REQUESTED, RunRecord, load_run, reconcile
from dapo_ops.model.run import RunState

ON_NODE_LOSS = ("stop", "keep")
FENCE_MARK = "DAPO-FENCE "


@dataclass
class Health:
    lost: dict[str, str] = field(default_factory=dict)   # node -> why it is lost
    job: str | None = None                               # Ray's job status (None: not asked)
    fence: dict[str, str] = field(default_factory=dict)  # node -> what became of the run's firewall table, if gone


def look_command(record: RunRecord) -> str:
    """One FENCE_MARK line first: whether the run's nftables table is still loaded; then `npu-smi info`, whose exit
    code is the command's. Reloading the site's firewall (`systemctl reload nftables`: `flush ruleset`) removes the
    table; it is loaded again from the run's own file (ray-firewall.nft deletes and redefines the table in one
    transaction) while the node's lock is still the run's, and removed again if a `stop` (which removes the table,
    then the lock) released the lock meanwhile."""
    rules, table = shlex.quote(f"{record.node_dir}/ray-firewall.nft"), shlex.quote(firewall_table(record.run_id))
    owned = locks.owned_by(record.run_id)
    return (f"if [ -f {rules} ] && command -v nft >/dev/null && {owned}; then "
            f"if nft list table inet {table} >/dev/null 2>&1; then echo '{FENCE_MARK}ok'; "
            f"elif out=$(nft -f {rules} 2>&1); then "
            f"if {owned}; then echo '{FENCE_MARK}restored'; else nft delete table inet {table} 2>/dev/null; fi; "
            f"else echo '{FENCE_MARK}failed' \"$(echo \"$out\" | tail -n 1)\"; fi; fi; npu-smi info")


def split_fence(text: str) -> tuple[str, str | None]:
    """(npu-smi's output, what the first FENCE_MARK line says, or None when the run has no table) (pure)."""
    first, newline, rest = text.partition("\n")
    if first.startswith(FENCE_MARK):
        return rest, first[len(FENCE_MARK):].strip()
    return text, None


def fence_note(node: str, fence: str) -> str | None:
    """What to tell the user of the fence line of a node (pure): nothing while the table is there."""
    if fence == "ok":
        return None
    if fence == "restored":
        return (f"{node}: the run's firewall table was gone (a reload of the site's firewall flushes it) and is "
                "loaded again")
    detail = fence.removeprefix("failed").strip()
    return (f"{node}: the run's firewall table is gone and could not be loaded again ({detail or 'nft failed'}): "
            "Ray's ports answer the network, token-checked only")


def node_problem(output_rc: tuple[int, str], expected_npus: int | None) -> str | None:
    """What is wrong with a node from its `npu-smi info` (pure): unhealthy or missing NPUs, or None."""
    rc, text = output_rc
    if rc != 0:
        last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "no output")
        return f"npu-smi info failed (exit {rc}): {last}"
    try:
        info = parse_npu_smi_info(text)
    except DapoError as exc:
        return f"npu-smi info unreadable: {exc}"
    problems = [f"NPU {c.npu_id} health is {c.health}" for c in info.chips if c.health != "OK"]
    if expected_npus is not None and len(info.chips) < expected_npus:
        problems.append(f"{len(info.chips)} of its {expected_npus} NPUs are visible")
    return "; ".join(problems) or None


def check(record: RunRecord, by_name: dict[str, HostSpec], timeout: float = PROBE) -> Health:
    """One look at the run's nodes and Ray (one SSH round trip per node, then two on the head)."""
    expected = (record.rehearsal or {}).get("hosts") or {}
    hosts = [by_name[n] for n in record.nodes]

    fences: dict[str, str] = {}

    def look(host: HostSpec) -> str | None:
        result = run_on(host, look_command(record), timeout=timeout)
        if result.failure is not None:
            return f"unreachable over SSH ({result.error})"
        output, fence = split_fence(result.stdout)
        if fence is not None:
            fences[host.name] = fence
        return node_problem((result.exit_code, output), expected.get(host.name))

    results = fan_out(hosts, look, deadline=time.monotonic() + timeout + 10).results
    health = Health({name: why for name, why in results.items() if why},
                    fence={name: fence for name, fence in fences.items() if fence != "ok"})
    health.lost.update({h.name: "no answer over SSH" for h in hosts if h.name not in results})
    if record.head in health.lost:
        return health
    head = by_name[record.head]
    try:
        seen = cluster.probe(head, head.layout.python, record.dashboard, record.token_file, timeout)
        for name, address in (record.addresses or {}).items():
            if address not in seen.get("hosts", []) and name not in health.lost:
                health.lost[name] = f"Ray counts its node ({address}) dead"
        if record.submission_id:
            health.job = cluster.job_status(head, head.layout.ray, record.dashboard, record.token_file,
                                            record.submission_id, timeout)
    except cluster.LaunchError as exc:
        health.lost[record.head] = f"Ray on the head does not answer: {exc}"
    return health


def loss_reason(lost: dict[str, str]) -> str:
    return "; ".join(f"{name} lost during training: {why}" for name, why in sorted(lost.items()))


def handle_loss(record: RunRecord, by_name: dict[str, HostSpec], lost: dict[str, str], on_node_loss: str,
                say) -> None:
    """Record the loss; with "stop", stop the job and Ray on the nodes still there and free their locks."""
    reason = loss_reason(lost)
    if on_node_loss == "keep":
        record.reason = f"{reason} (kept running: --on-node-loss keep)"
        record.save()
        return
    record.mark(RunState.FAILED, reason)
    rest = [by_name[n] for n in record.nodes if n not in lost]
    head = by_name[record.head]
    if record.head not in lost and record.submission_id:
        keep_console(record, head, say)
        say(f"stopping job {record.submission_id}")
        try:
            cluster.job_stop(head, head.layout.ray, record.dashboard, record.token_file,
                             record.submission_id)
        except cluster.LaunchError as exc:
            say(f"the job did not stop: {exc}")
    say(f"stopping Ray on {', '.join(h.name for h in rest) or 'no node'}")
    errors = teardown.tear_down(rest, record.run_id, record.node_dir, teardown.stop_timeout(rest or [head]))
    left = sorted(lost) + sorted(errors)
    record.mark(RunState.FAILED, f"{reason} (stopped on the rest; Ray and the lock left on {', '.join(left)}: "
                          f"`dapo-ops stop {record.run_id}` retries)")


def being_stopped(record: RunRecord) -> bool:
    """Whether a `dapo-ops stop` (another process) is stopping the run: the record on disk says so. The record here
    takes what is on disk then, so a stop that has ended leaves it stopped."""
    on_disk = load_run(record.run_id)
    if STOP_REQUESTED not in on_disk.timestamps:
        return False
    record.state, record.reason, record.timestamps = on_disk.state, on_disk.reason, on_disk.timestamps
    return True


def watch_once(record: RunRecord, by_name: dict[str, HostSpec], on_node_loss: str, say) -> Health:
    """Check a running run once and act on what is found: a loss is handled, an ended job reconciled."""
    health = check(record, by_name)
    for node, fence in sorted(health.fence.items()):
        note = fence_note(node, fence)
        if note:
            say(note)
    if health.lost and record.state == RunState.RUNNING and being_stopped(record):
        say(f"{record.run_id} is being stopped (dapo-ops stop): {', '.join(sorted(health.lost))} going away is the "
            "stop, not a loss")
    elif health.lost and record.state == RunState.RUNNING:
        handle_loss(record, by_name, health.lost, on_node_loss, say)
    elif health.job is not None:
        reconcile(record, health.job)
        if record.state != RunState.RUNNING:  # the job is over: its API keys leave the nodes now, not at `stop`
            hosts = [by_name[n] for n in record.nodes]
            failed = {h: e for h, e in teardown.forget_job_secrets(hosts, record.run_id).items() if e}
            if failed:
                say(f"the job's secrets could not be removed from {', '.join(sorted(failed))} "
                    f"({'; '.join(failed.values())}): `dapo-ops stop {record.run_id}` removes them")
    return health
