"""`dapo-ops stage`: the job's model directory and data files on every node it uses, checked by sha256 on each
node, at the cost of about one copy (docs/stage.md).

check the source (the model loads, the data has verl's columns, overlong prompts counted) → each node's copies
hashed there, shared directories found → free space → the files each node lacks, streamed once from the controller
into a chain of nodes that pass them on (or to each node from the controller when the nodes cannot reach each
other) → every node reports each file written under its name only after its sha256 matched.
"""

from __future__ import annotations

import posixpath
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dapo_ops.errors import DapoError, UsageError
from dapo_ops.fleet.shared_dir import is_shared
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.fleet.transfer import read_file
from dapo_ops.job.spec import JobSpec
from dapo_ops.stage import checks, chain, nodes as node_ops
from dapo_ops.stage.nodes import each
from dapo_ops.stage.plan import Placement, SourceFile, StagePlan, check_targets, human_bytes, plan, target_dirs
from dapo_ops.stage.source import (Source, data_targets, hash_local, local_model_names, model_refusal,
                                   model_targets, source_files)


@dataclass
class Hooks:
    say: Callable[[str], None] = lambda message: None
    start: Callable[[dict[str, int]], None] = lambda totals: None     # node -> bytes it will receive
    event: Callable[[dict], None] = lambda event: None                # a relay report (progress, file, done)


@dataclass
class StageResult:
    source: str
    files: int
    total_bytes: int
    mode: str                        # "pipeline", "direct", "one node" or "nothing to send"
    shared: list[str]                # target directories every node shares
    nodes: dict[str, dict] = field(default_factory=dict)
    sent_bytes: int = 0              # what the controller's uplink carried
    seconds: float = 0.0
    overlong: dict | str | None = None
    left_out: list[str] = field(default_factory=list)
    why_direct: str = ""


def _source_node(hosts: list[HostSpec], source: Source) -> HostSpec | None:
    return next((h for h in hosts if h.name == source.node), None) if source.node else None


def gather_sources(spec: JobSpec, model_from: Source, data_from: Source | None, source_node: node_ops.Node | None,
                   hooks: Hooks) -> tuple[list[SourceFile], list[str]]:
    """The source's files with their sha256 (hashed once, where they are), and what the model directory holds that
    the job does not read."""
    if source_node is None:
        names, left_out = local_model_names(model_from.path)
    else:
        listing = node_ops.list_model(source_node, model_from.path)
        if listing["problems"]:
            raise UsageError(model_refusal(listing["problems"]))
        names, left_out = listing["files"], listing["left_out"]
    pairs = [(s, t, "model") for s, t in model_targets(model_from.path, spec.model.path, names)]
    pairs += data_targets(spec.data.paths(), data_from)
    paths = [s for s, _, _ in pairs]
    hooks.say(f"hashing {len(paths)} file(s) at the source ({model_from})")
    if source_node is None:
        digests = hash_local(paths)
    else:
        digests = {p: _as_dict(d) for p, d in node_ops.hash_files(source_node, paths, node_ops.SOURCE_HASH_TIMEOUT).items()}
    files = source_files(pairs, digests)
    check_targets(files)
    return files, left_out


def _as_dict(digest) -> dict:
    if digest.error:
        return {"error": digest.error}
    return {"missing": True} if digest.sha256 is None else {"size": digest.size, "sha256": digest.sha256}


def check_content(spec: JobSpec, files: list[SourceFile], source_node: node_ops.Node | None) -> dict | str:
    """The data files' columns (UsageError), then the overlong prompts' count. A source node's data files and
    tokenizer are read into a temporary directory on the controller for it (they are small beside the weights)."""
    wanted = [f for f in files if f.what != "model" or posixpath.basename(f.target) in checks.TOKENIZER_FILES]
    model_dir = posixpath.dirname(next(f.source for f in files if f.what == "model"))
    with tempfile.TemporaryDirectory(prefix="dapo-stage-check-") as scratch:
        local = {f.target: f.source for f in files}
        if source_node is not None:
            model_dir = str(Path(scratch, "model"))
            for index, f in enumerate(wanted):   # data files by index: two may share a name
                name = posixpath.basename(f.target)
                copy = Path(scratch, "model", name) if f.what == "model" else Path(scratch, "data", f"{index}-{name}")
                copy.parent.mkdir(exist_ok=True)
                try:
                    copy.write_bytes(read_file(source_node.conn, source_node.host, f.source, 60 + f.size / (10 << 20)))
                except OSError as exc:   # socket.timeout among them
                    raise DapoError(f"{source_node.name}: reading {f.source} for the checks failed ({exc})") from None
                local[f.target] = str(copy)
        checks.check_data({local[f.target]: f.what for f in files if f.what != "model"})
        train = [local[f.target] for f in files if f.what == "data.train_files"]
        counted = checks.count_overlong(model_dir, train, spec.data.max_prompt_length)
    return counted if isinstance(counted, str) else counted.__dict__


def find_shared(first: node_ops.Node, hosts: list[HostSpec], files: list[SourceFile]) -> list[str]:
    """The target directories every node sees as one: each one's nearest existing directory on the first node is
    tested (a marker written there is seen on all; nothing is made). The root filesystem is no shared one."""
    ancestors = node_ops.existing_ancestors(first, target_dirs(files))
    shared = {a for a in set(ancestors.values()) if a != "/" and is_shared(hosts, a)}
    return [d for d, a in ancestors.items() if a in shared]


def read_listings(nodes: list[node_ops.Node], files: list[SourceFile], placement: Placement) -> dict:
    def hashed(node: node_ops.Node):
        mine = placement.targets(files, node.name)
        return node_ops.hash_files(node, [f.target for f in mine], node_ops.hash_timeout(sum(f.size for f in mine)))

    return each(nodes, hashed)


def check_space(nodes: list[node_ops.Node], the_plan: StagePlan) -> None:
    """Each node's filesystems must hold what it will receive (its files grouped by filesystem); UsageError."""
    def short(node: node_ops.Node) -> list[str]:
        needs = the_plan.needs.get(node.name, [])
        if not needs:
            return []
        free = node_ops.free_space(node, target_dirs(needs))
        want: dict[str, int] = {}
        for f in needs:
            mount = free[posixpath.dirname(f.target)][0]
            want[mount] = want.get(mount, 0) + f.size
        avail = {mount: bytes_ for mount, bytes_ in free.values()}
        return [f"{node.name} has {human_bytes(avail[m])} free on {m} and needs {human_bytes(w)}"
                for m, w in want.items() if w > avail[m]]

    problems = [p for found in each(nodes, short).values() for p in found]
    if problems:
        raise UsageError("not enough space: " + "; ".join(problems) + "; nothing was copied")


def stage(spec: JobSpec, job_hosts: list[HostSpec], inventory_hosts: list[HostSpec], model_from: Source,
          data_from: Source | None, hooks: Hooks = Hooks()) -> StageResult:
    started = time.monotonic()
    with ExitStack() as cleanup:
        source_host = _source_node(inventory_hosts, model_from) or _source_node(inventory_hosts, data_from or model_from)
        if data_from and model_from.node != data_from.node and (model_from.node or data_from.node):
            raise UsageError("--model-from and --data-from must both be on the controller or on the same node")
        source_node = None
        if source_host is not None:
            source_node = node_ops.open_nodes([source_host])[0]
            cleanup.callback(node_ops.close_nodes, [source_node])
            cleanup.callback(node_ops.remove_run_dir, source_node)
            node_ops.push_relay(source_node)
        files, left_out = gather_sources(spec, model_from, data_from, source_node, hooks)
        hooks.say("checking the data files and counting overlong prompts")
        overlong = check_content(spec, files, source_node)
        nodes = node_ops.open_nodes(job_hosts)
        cleanup.callback(node_ops.close_nodes, nodes)
        cleanup.callback(each, nodes, node_ops.remove_run_dir)    # each node's, once it has one
        each(nodes, node_ops.push_relay)
        shared = find_shared(nodes[0], job_hosts, files)
        placement = Placement([n.name for n in nodes], tuple(shared))
        hooks.say(f"hashing the copies on {len(nodes)} node(s)")
        the_plan = plan(files, placement, read_listings(nodes, files, placement))
        result = StageResult(str(model_from), len(files), sum(f.size for f in files), "nothing to send", shared,
                             overlong=overlong, left_out=left_out)
        if the_plan.unreadable:
            node, bad = next(iter(the_plan.unreadable.items()))
            raise DapoError(f"{node} cannot read its copy of {bad[0]}: fix it there, then stage again")
        check_space(nodes, the_plan)
        if the_plan.to_send:
            chain.send(the_plan, nodes, source_node, result, hooks, cleanup)
        result.nodes = outcome(the_plan, result)
        result.seconds = time.monotonic() - started
        return result


def outcome(the_plan: StagePlan, result: StageResult) -> dict[str, dict]:
    nodes = {}
    for name in the_plan.placement.nodes:
        mine = the_plan.placement.targets(the_plan.files, name)
        needs = the_plan.needs.get(name, [])
        reported = result.nodes.get(name, {})
        nodes[name] = {"files": len(mine), "in_place": len(mine) - len(needs), "sent_files": reported.get("files", 0),
                       "sent_bytes": reported.get("bytes", 0), "ok": reported.get("ok", not needs),
                       "problem": reported.get("problem", ""),
                       "shared_from": None if len(mine) == len(the_plan.files) else the_plan.placement.nodes[0]}
    return nodes
