"""What doctor reads: a bundle directory (what `doctor RUN` collects, readable offline later) or loose log files.

Bundle layout (runs/launch/<run>/doctor/, or any directory a site fills by other means):

    bundle.json                 optional: {"schema": "dapo-ops/doctor-bundle/v1", "run": RUN,
                                           "nodes": {NODE: {"address": IP, "npus": N, "utc_offset": "+0800",
                                                            "skew_s": 0.4, "boot_time": ISO-8601}}}
    NODE/ray/...                Ray's session logs (raylet.out, gcs_server.out, worker-*.err, job-driver-*.log, ...)
    NODE/plog/...               CANN plogs and device logs ($ASCEND_PROCESS_LOG_PATH or ~/ascend/log/{debug,run})
    NODE/console.log            the job's console (`ray job logs`), on the head
    NODE/dmesg.txt              the kernel ring buffer
    audit/, audit.json          the fresh audit's raw outputs and its error and warning findings (not read as logs)

A loose file belongs to the node its directory is named after; a directory without bundle.json is read the same
way (each sub-directory a node, files directly in it the directory's own node).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from dapo_ops.doctor.events import NodeClock
from dapo_ops.errors import UsageError

BUNDLE_FILE = "bundle.json"
AUDIT_FILE = "audit.json"
NOT_LOG_SUFFIXES = (".json", ".md")       # the bundle's description and notes beside the logs
BUNDLE_SCHEMA = "dapo-ops/doctor-bundle/v1"
NOT_LOGS = {"audit"}                      # directories that hold no logs
OFFSET = re.compile(r"^([+-])(\d{2}):?(\d{2})$")


@dataclass(frozen=True)
class NodeMeta:
    name: str
    address: str | None = None
    npus: int | None = None
    clock: NodeClock = NodeClock()


@dataclass(frozen=True)
class LogFile:
    node: str
    path: Path
    display: str          # the name shown as evidence: NODE/relative/path
    kind: str             # plog, ray, console, dmesg, other


@dataclass
class Inputs:
    files: list[LogFile] = field(default_factory=list)
    nodes: dict[str, NodeMeta] = field(default_factory=dict)
    run: str | None = None
    problems: dict[str, str] = field(default_factory=dict)    # what the collection could not read
    audit: list[str] = field(default_factory=list)            # the fresh audit's findings, one line each

    def node_of_address(self, address: str | None) -> str | None:
        return next((n.name for n in self.nodes.values() if address and n.address == address), None)


def kind_of(relative: Path) -> str:
    """The log format a file is in, from its name and folder (the layouts of Ray, CANN and dmesg)."""
    name, parts = relative.name, set(relative.parts[:-1])
    if name.startswith("dmesg"):
        return "dmesg"
    if "plog" in parts or re.match(r"^(plog|device)-\d+", name):
        return "plog"
    if name.startswith(("job-driver-", "console", "driver")):
        return "console"
    if "ray" in parts or name.endswith((".out", ".err")) or name.startswith(("python-core-", "raylet", "gcs_server")):
        return "ray"
    return "other"


def _offset(value, where: str) -> timedelta:
    found = OFFSET.match(str(value))
    if not found:
        raise UsageError(f"{where}: utc_offset {value!r} is not like +0800 or -05:00")
    delta = timedelta(hours=int(found[2]), minutes=int(found[3]))
    return delta if found[1] == "+" else -delta


def _boot_time(value, where: str) -> datetime | None:
    if value is None:
        return None
    try:
        stamp = datetime.fromisoformat(str(value))
    except ValueError:
        raise UsageError(f"{where}: boot_time {value!r} is not an ISO-8601 time") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def parse_meta(data, source: Path) -> tuple[str | None, dict[str, NodeMeta]]:
    """bundle.json: the run and, per node, its address, NPU count and clock."""
    if not isinstance(data, dict) or data.get("schema") != BUNDLE_SCHEMA or not isinstance(data.get("nodes", {}), dict):
        raise UsageError(f"{source}: not a doctor bundle description (schema {BUNDLE_SCHEMA!r}, nodes: {{...}})")
    nodes = {}
    for name, raw in data.get("nodes", {}).items():
        where = f"{source}: node {name}"
        if not isinstance(raw, dict):
            raise UsageError(f"{where}: must be a mapping")
        npus = raw.get("npus")
        if npus is not None and (not isinstance(npus, int) or npus < 0):
            raise UsageError(f"{where}: npus must be a whole number")
        try:
            skew = timedelta(seconds=float(raw.get("skew_s") or 0))
        except (TypeError, ValueError):
            raise UsageError(f"{where}: skew_s must be a number of seconds") from None
        clock = NodeClock(utc_offset=_offset(raw.get("utc_offset", "+0000"), where), skew=skew,
                          boot_time=_boot_time(raw.get("boot_time"), where))
        nodes[name] = NodeMeta(name, raw.get("address"), npus, clock)
    return data.get("run"), nodes


def _is_text(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return b"\0" not in handle.read(4096)
    except OSError:
        return False


def _directory_files(directory: Path) -> list[LogFile]:
    files = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        relative = path.relative_to(directory)
        if relative.suffix in NOT_LOG_SUFFIXES or set(relative.parts[:-1]) & NOT_LOGS or not _is_text(path):
            continue
        nested = len(relative.parts) > 1
        node = relative.parts[0] if nested else directory.name
        within = Path(*relative.parts[1:]) if nested else relative
        files.append(LogFile(node, path, f"{node}/{within}", kind_of(within)))
    return files


def _problems(meta: Path) -> dict[str, str]:
    problems = json.loads(meta.read_text()).get("problems") or {}
    return {str(k): str(v) for k, v in problems.items()} if isinstance(problems, dict) else {}


def _audit_lines(path: Path) -> list[str]:
    """The audit's findings as `SEVERITY host [NPU n]: message`; a file that is not the audit's is ignored."""
    try:
        findings = json.loads(path.read_text()).get("findings", [])
    except (OSError, ValueError, AttributeError):
        return []
    lines = []
    for f in findings if isinstance(findings, list) else []:
        if isinstance(f, dict) and f.get("message"):
            npu = f" NPU {f['npu']}" if f.get("npu") is not None else ""
            lines.append(f"{f.get('severity', '?')} {f.get('host', '?')}{npu}: {f['message']}")
    return lines


def read_inputs(paths: list[Path]) -> Inputs:
    """The log files and node descriptions behind the given paths; a path that is not there is a usage error."""
    inputs = Inputs()
    for path in paths:
        if not path.exists():
            raise UsageError(f"{path}: no such file or directory (doctor takes a run id or log files/bundles)")
        if path.is_dir():
            meta = path / BUNDLE_FILE
            if meta.is_file():
                try:
                    run, nodes = parse_meta(json.loads(meta.read_text()), meta)
                except ValueError as exc:
                    raise UsageError(f"{meta}: not valid JSON: {exc}") from None
                inputs.run = inputs.run or run
                inputs.nodes.update(nodes)
                inputs.problems.update(_problems(meta))
            inputs.audit += _audit_lines(path / AUDIT_FILE)
            inputs.files += _directory_files(path)
        elif _is_text(path):
            node = path.parent.name or "local"
            inputs.files.append(LogFile(node, path, f"{node}/{path.name}", kind_of(Path(path.name))))
    for node in {f.node for f in inputs.files} - set(inputs.nodes):
        inputs.nodes[node] = NodeMeta(node)
    if not inputs.files:
        raise UsageError(f"no log files in {', '.join(str(p) for p in paths)}")
    return inputs
