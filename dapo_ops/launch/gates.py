"""Two gates of a launch, each run on the chosen nodes: the audit before any change, the rehearsal of every rank
once Ray is up (launch.py runs them)."""

from __future__ import annotations

from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.launch import cluster, rehearsal
from dapo_ops.launch.records import RunRecord
from dapo_ops.launch.steps import Steps
from dapo_ops.manifest import StackManifest


def run_rehearsal(head: HostSpec, record: RunRecord, python: str, steps: Steps) -> rehearsal.Outcome:
    events: list[dict] = []

    def on_line(line: str) -> None:
        event = rehearsal.parse_event(line)
        if event is None:
            return
        events.append(event)
        if event["event"] == "reserved":
            steps.note(f"{event.get('bundles')} one-NPU bundles reserved on {', '.join(event.get('nodes', []))} in "
                       f"{event.get('seconds')} s; starting the rank actors")
        elif event["event"] == "placed":
            hosts = ", ".join(f"{n} on {h}" for h, n in sorted(event.get("hosts", {}).items()))
            steps.note(f"{sum(event.get('hosts', {}).values())} ranks placed ({hosts}) in {event.get('seconds')} s")
        elif event["event"] == "checked":
            steps.note("every rank's host, environment and NPU device checked")

    exit_code, stderr = cluster.rehearse(head, record.node_dir, python, rehearsal.Timeouts().total, on_line)
    result = rehearsal.outcome(events)
    record.rehearsal = result.as_record()
    record.save()
    if not result.ok:
        if not any(e["event"] == "result" for e in events):
            tail = " | ".join(stderr.strip().splitlines()[-3:]) or f"exit {exit_code}"
            raise cluster.LaunchError(f"the rehearsal on {head.name} ended without a result: {tail}")
        raise cluster.LaunchError(f"rehearsal failed: {result.describe_failure()}")
    return result


def audit_nodes(hosts: list[HostSpec], manifest: StackManifest, npus: int, timeout: float):
    from dapo_ops.audit.analyze import analyze
    from dapo_ops.audit.collect import collect

    raws, _ = collect(hosts, lambda h: npus, manifest.platform["install_path"], timeout=timeout,
                      max_workers=32)
    return analyze(raws, manifest)
