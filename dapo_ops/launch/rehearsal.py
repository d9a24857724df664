"""The launch rehearsal, controller side: what the driver on the head is told (rehearsal.json), and what its
`DAPO-REHEARSAL` event lines mean. Pure functions; the SSH call that runs the driver lives in cluster.py."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from dapo_ops.errors import UsageError
from dapo_ops.job import node_files
from dapo_ops.job.node_files import required_files
from dapo_ops.job.render import RenderNode
from dapo_ops.job.spec import JobSpec
from dapo_ops.ray_ports import ray_ports
from dapo_ops.model.variables import REHEARSAL_BACKEND

# pushed to the head's run directory; the driver imports rehearsal_tcp and node_files from its own directory
DRIVER_FILES = (*(Path(__file__).with_name(name) for name in ("rehearsal_driver.py", "rehearsal_tcp.py")),
                Path(node_files.__file__))
EVENT_PREFIX = "DAPO-REHEARSAL "
STAGE_HINT = " — `dapo-ops stage JOB` puts the job's model and data on every node, checked by sha256 (docs/stage.md)"
BACKENDS = ("hccl", "gloo", "tcp")
BACKEND_VAR = REHEARSAL_BACKEND.name
# Exported by CANN's set_env.sh (toolkit) and NNAL's (ATB): an actor without them did not source the environment.
REQUIRED_ENV = ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ATB_HOME_PATH")


# HCCL waits HCCL_CONNECT_TIMEOUT + 20 s before it fails a link set-up: the 20 s tell every rank why (the pinned
# CANN's environment variable reference, HCCL_CONNECT_TIMEOUT, hiascend canncommercial/83RC1 envref_07_0149); 120 s
# is the smallest value CANN accepts.
HCCL_REPORT_DELAY = 20
HCCL_CONNECT_MIN = 120


@dataclass(frozen=True)
class Timeouts:
    placement: float = 180.0   # placement groups ready and every actor started
    check: float = 60.0        # every actor's host/environment/device check
    hccl_connect: int = HCCL_CONNECT_MIN   # the HCCL_CONNECT_TIMEOUT (and HCCL_EXEC_TIMEOUT) the rehearsal's ranks get
    report_grace: float = 25.0  # after HCCL's report: the failing rank's exception reaching the driver

    @property
    def collective(self) -> float:
        """How long the all-reduce and the SP all-to-all may take: past HCCL's own report of a failed link, so its
        cause reaches the user rather than the rehearsal's own "no answer"."""
        return self.hccl_connect + HCCL_REPORT_DELAY + self.report_grace

    @property
    def total(self) -> float:
        """The driver's worst case: two placement waits (groups, actors), two checks (environment, endpoints), the
        collectives and their grace, plus Ray's start-up."""
        return self.placement * 2 + self.check * 2 + self.collective + 15 + 60


def backend_for(host_vars: dict) -> str:
    backend = str(host_vars.get(BACKEND_VAR) or "hccl")
    if backend not in BACKENDS:
        raise UsageError(f"{BACKEND_VAR}: {backend!r} is not one of {', '.join(BACKENDS)}")
    return backend


def config(spec: JobSpec, nodes: list[RenderNode], backend: str, timeouts: Timeouts = Timeouts(),
           chunk_bytes: int = 4096) -> dict:
    """rehearsal.json: the nodes in rank order, their NPUs, the SP group size, the backend and the deadlines."""
    ports = ray_ports(nodes[0].ray_ports, gcs=spec.cluster.ray_port, dashboard=spec.cluster.dashboard_port)
    return {
        "nodes": [{"name": n.name, "ip": n.ip, "nic": n.nic} for n in nodes],
        "gcs_address": f"{nodes[0].ip}:{spec.cluster.ray_port}",  # not "auto", which reads /tmp/ray
        "npus_per_node": spec.cluster.npus_per_node,
        "sp_size": spec.actor.ulysses_sequence_parallel_size,
        "backend": backend,
        "required_env": list(REQUIRED_ENV),
        "required_files": required_files(spec),
        "model_dir": spec.model.path.rstrip("/"),
        "chunk_bytes": chunk_bytes,
        # every Ray port, pinned ([first, last]): a rank's own listening port is none of them
        "ray_ports": [[first, last] for _, first, last in ports.ranges],
        "placement_timeout": timeouts.placement,
        "check_timeout": timeouts.check,
        "collective_timeout": timeouts.collective,
        "hccl_connect_timeout": timeouts.hccl_connect,
    }


def parse_event(line: str) -> dict | None:
    """One driver output line -> its event, or None for any other line (Ray's own chatter)."""
    line = line.strip()
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(EVENT_PREFIX):])
    except ValueError:
        return None
    return event if isinstance(event, dict) and "event" in event else None


@dataclass
class Outcome:
    ok: bool
    backend: str | None = None
    ranks: int = 0
    hosts: dict = field(default_factory=dict)           # hostname -> ranks placed there
    placed_seconds: float | None = None
    seconds: float | None = None
    failures: list = field(default_factory=list)        # {"phase", "rank", "host", "error"}
    per_rank: list = field(default_factory=list)        # {"rank", "host", "device", "pid", "timings"}

    def timing_summary(self) -> dict:
        """Per phase: the median and the slowest rank (a straggler shows up here)."""
        phases: dict[str, list[tuple[float, dict]]] = {}
        for rank in self.per_rank:
            for phase, seconds in rank.get("timings", {}).items():
                phases.setdefault(phase, []).append((seconds, rank))
        summary = {}
        for phase, values in phases.items():
            slowest_seconds, slowest = max(values, key=lambda v: v[0])
            summary[phase] = {"median": round(statistics.median(v[0] for v in values), 4),
                              "max": slowest_seconds, "slowest_rank": slowest["rank"], "slowest_host": slowest["host"]}
        return summary

    def describe_failure(self, limit: int = 3) -> str:
        if not self.failures:
            return "the rehearsal driver ended without a result"
        parts = []
        for failure in self.failures[:limit]:
            where = f"rank {failure['rank']} on {failure['host']}" if failure.get("rank") is not None else \
                failure.get("phase", "driver")
            parts.append(f"{where}: {failure['error']}")
        more = len(self.failures) - limit
        hint = STAGE_HINT if any(p in f.get("error", "") for f in self.failures for p in node_files.PROBLEM_PHRASES) \
            else ""
        return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "") + hint

    def as_record(self) -> dict:
        return {"ok": self.ok, "backend": self.backend, "ranks": self.ranks, "hosts": self.hosts,
                "placed_seconds": self.placed_seconds, "seconds": self.seconds, "failures": self.failures,
                "timings": self.timing_summary(), "per_rank": self.per_rank}


def outcome(events: list[dict]) -> Outcome:
    """Fold the driver's events into an Outcome; no result event means the driver died."""
    result = Outcome(ok=False)
    for event in events:
        kind = event.get("event")
        if kind == "placing":
            result.ranks = int(event.get("ranks", 0))
        elif kind == "placed":
            result.hosts = dict(event.get("hosts", {}))
            result.placed_seconds = event.get("seconds")
        elif kind == "result":
            result.ok = bool(event.get("ok"))
            result.backend = event.get("backend")
            result.seconds = event.get("seconds")
            result.failures = list(event.get("failures", []))
            result.per_rank = list(event.get("per_rank", []))
    return result
