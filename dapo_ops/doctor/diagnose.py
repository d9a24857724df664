"""One timeline over every node, and the root cause on it.

Events from all sources go on one timeline (each node's stamps already on the controller's UTC, events.NodeClock).
The earliest fatal event is the root cause; everything after it is its consequence, linked through the
signatures' `causes` edges when a path leads there (the chain), else shown as fallout. When no fatal event is
there, the first symptom stands in as the root, and the diagnosis says that the failing rank's own logs are
probably missing.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from dapo_ops.doctor.bundle import Inputs, read_inputs
from dapo_ops.doctor.codes import decode_details
from dapo_ops.doctor.events import Event, apply_pid_map, pid_map
from dapo_ops.doctor.scan import scan_text
from dapo_ops.doctor.signatures import Catalog, Signature, default_catalog

EVIDENCE_LINES = 3


@dataclass
class Evidence:
    file: str
    line: int
    text: str


@dataclass
class Finding:
    signature: str
    layer: str
    node: str
    rank: int | None
    npu: int | None
    time: str | None
    cause: str
    fix: str
    action: str | None
    evidence: list[Evidence]
    count: int
    decoded: list[str] = field(default_factory=list)  # the codes of the evidence line, in words
    link: str = "root cause"                     # or how it follows from the root cause
    chain: list[str] = field(default_factory=list)   # signature ids from the root's to this one's

    @property
    def where(self) -> str:
        return where(self.node, self.rank, self.npu)


@dataclass
class Diagnosis:
    found: bool
    root: Finding | None
    consequences: list[Finding]
    note: str | None
    events: int
    noise_hidden: int
    files: int
    nodes: list[str]
    run: str | None = None
    problems: dict[str, str] = field(default_factory=dict)   # what could not be collected
    audit: list[str] = field(default_factory=list)           # what a fresh audit of the nodes says now


def where(node: str, rank: int | None, npu: int | None) -> str:
    return node + (f" rank {rank}" if rank is not None else "") + (f" NPU {npu}" if npu is not None else "")


def read_events(inputs: Inputs, catalog: Catalog) -> list[Event]:
    events: list[Event] = []
    for log in inputs.files:
        clock = inputs.nodes[log.node].clock
        events += scan_text(log.path.read_bytes(), node=log.node, file=log.display, kind=log.kind, clock=clock,
                            catalog=catalog)
    for event in events:   # a line forwarded from another node (Ray's `ip=` prefix) or about one (a dead node)
        address = event.details.get("node_ip") or event.ip
        if address:
            event.node = inputs.node_of_address(address) or address
    apply_pid_map(events, pid_map(events))
    return _without_forwarded_copies(events)


def _without_forwarded_copies(events: list[Event]) -> list[Event]:
    """Ray forwards a worker's output to the driver's console; when the worker's own log on its node was read too,
    the console's copy (which carries no time of its own) is dropped."""
    own = {(e.node, e.pid, e.signature) for e in events if e.ip is None and e.pid is not None}
    return [e for e in events if e.ip is None or (e.node, e.pid, e.signature) not in own]


def _is_noise(event: Event, signature: Signature, inputs: Inputs) -> bool:
    npus = inputs.nodes[event.node].npus if event.node in inputs.nodes else None
    return signature.noise or (signature.noise_without_npus and npus == 0)


def chain_between(catalog: Catalog, start: str, goal: str) -> list[str]:
    """The shortest path of `causes` edges from start to goal (breadth first); empty when there is none."""
    paths = deque([[start]])
    seen = {start}
    while paths:
        path = paths.popleft()
        if path[-1] == goal:
            return path
        for nxt in catalog.by_id[path[-1]].causes:
            if nxt not in seen:
                seen.add(nxt)
                paths.append(path + [nxt])
    return []


def _fill(template: str | None, event: Event, run: str | None) -> str | None:
    if template is None:
        return None
    filled = (template.replace("{node}", event.node)
              .replace("{rank}", str(event.rank if event.rank is not None else "N"))
              .replace("{npu}", str(event.npu if event.npu is not None else "N")))
    return re.sub(r"\bRUN\b", run, filled) if run else filled


def _finding(group: list[Event], catalog: Catalog, run: str | None) -> Finding:
    first = group[0]
    signature = catalog.by_id[first.signature]
    details: dict[str, str] = {}
    for event in group:     # a message's lines: the code on one, the operator or port on the next
        for key, value in event.details.items():
            details.setdefault(key, value)
    decoded = decode_details(details)
    cause = f"{where(first.node, first.rank, first.npu)}: {signature.meaning}"
    if decoded:
        cause += " [" + "; ".join(decoded) + "]"
    return Finding(signature=signature.id, layer=signature.layer, node=first.node, rank=first.rank, npu=first.npu,
                   time=first.time.isoformat() if first.time else None, cause=cause,
                   fix=_fill(signature.fix, first, run), action=_fill(signature.action, first, run),
                   evidence=[Evidence(e.file, e.line_no, e.text) for e in group[:EVIDENCE_LINES]], count=len(group),
                   decoded=decoded)


def _ordered(events: list[Event]) -> list[Event]:
    far = datetime.max.replace(tzinfo=None)
    return sorted(events, key=lambda e: (e.time is None, e.time.replace(tzinfo=None) if e.time else far))


def _groups(events: list[Event]) -> list[list[Event]]:
    """Events of one signature on one rank (or node, when the rank is unknown), in order of their first one."""
    groups: dict[tuple, list[Event]] = {}
    for event in events:
        groups.setdefault((event.signature, event.node, event.rank, event.npu), []).append(event)
    return list(groups.values())


def _link(root: Event, group: list[Event], catalog: Catalog) -> tuple[str, list[str]]:
    first = group[0]
    if root.time and first.time and first.time < root.time:
        return "before the root cause (not its consequence)", []
    if (first.node, first.rank) == (root.node, root.rank):
        return "after the root cause, on the same rank", []
    chain = chain_between(catalog, root.signature, first.signature)
    if chain:
        return "caused by the root cause: " + " -> ".join(chain), chain
    return "fallout after the root cause", []


def diagnose(inputs: Inputs, catalog: Catalog | None = None, since: datetime | None = None) -> Diagnosis:
    catalog = catalog or default_catalog()
    all_events = read_events(inputs, catalog)
    if since is not None:
        all_events = [e for e in all_events if e.time is None or e.time >= since]
    noise = {id(e) for e in all_events if _is_noise(e, catalog.by_id[e.signature], inputs)}
    events = _ordered([e for e in all_events if id(e) not in noise])
    base = dict(events=len(all_events), noise_hidden=len(noise), files=len(inputs.files),
                nodes=sorted(inputs.nodes), run=inputs.run, problems=inputs.problems, audit=inputs.audit)
    if not events:
        return Diagnosis(found=False, root=None, consequences=[], note=None, **base)
    fatal = [e for e in events if catalog.by_id[e.signature].fatal]
    root_event = (fatal or events)[0]
    note = None if fatal else ("no failure of its own was found, only symptoms: the first one is shown; the "
                               "failing rank's logs are probably not among those read")
    root, consequences = _root_and_consequences(root_event, _groups(events), catalog, inputs.run)
    return Diagnosis(found=True, root=root, consequences=consequences, note=note, **base)


def _root_and_consequences(root_event: Event, groups: list[list[Event]], catalog: Catalog,
                           run: str | None) -> tuple[Finding, list[Finding]]:
    root_group = next(g for g in groups if root_event in g)
    root = _finding(root_group, catalog, run)
    root.chain = [root.signature]
    consequences = []
    for group in groups:
        if group is not root_group:
            finding = _finding(group, catalog, run)
            finding.link, finding.chain = _link(root_event, group, catalog)
            consequences.append(finding)
    return root, consequences


def diagnose_paths(paths: list[Path], since: datetime | None = None) -> Diagnosis:
    return diagnose(read_inputs(paths), since=since)
