"""Which saved steps of a run are complete, read on every node (a command and a pure parser, as the audit's facts).

How verl saves a step (v0.7.0 verl/trainer/ppo/ray_trainer.py, _save_checkpoint, lines 938-1005): every rank writes
`global_step_N/actor/{model,optim,extra_state}_world_size_W_rank_R.pt` on its own node with `torch.save`, in place
(verl/utils/checkpoint/fsdp_checkpoint_manager.py save_checkpoint); then the driver writes `global_step_N/data.pt`
(the dataloader's state) and, last, `latest_checkpointed_iteration.txt` naming N. verl's own resume trusts that file
and checks only that the step's folder exists (verl/utils/checkpoint/checkpoint_manager.py find_latest_ckpt_path).

Here a step is complete when, over the run's nodes, every rank's three files and data.pt are there *whole* and the
step is not newer than the tracker. Whole: torch.save writes a zip archive (PyTorch's file format), which ends with
the zip end-of-central-directory record, so a file cut short by a crash lacks its last 22 bytes' signature.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from dapo_ops.errors import ParseError

TRACKER = "latest_checkpointed_iteration.txt"
ZIP_END = "504b0506"          # "PK\x05\x06": the end-of-central-directory record opening the archive's last 22 bytes
KINDS = ("model", "optim", "extra_state")
_FILE = r"global_step_[0-9]{1,9}/(actor/(model|optim|extra_state)_world_size_[0-9]{1,6}_rank_[0-9]{1,6}\.pt|data\.pt)"
_LINE = re.compile(r"file (?P<path>" + _FILE.replace("[0-9]", r"\d") + r") (?P<size>\d{1,18}) (?P<end>[0-9a-f]{0,8})")
_SHARD = re.compile(r"global_step_(\d+)/actor/(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt")


def listing_command(root: str) -> str:
    """Lists the root's tracker and every step file with its size and the signature of its last 22 bytes. The
    regular expression admits only verl's names, so no other file name (a newline in one, say) reaches the output."""
    return (f"cd -- {shlex.quote(root)} 2>/dev/null || {{ echo absent; exit 0; }}; "
            f"echo \"tracker $(head -c 32 {TRACKER} 2>/dev/null | tr -dc 0-9)\"; "
            f"find . -mindepth 2 -maxdepth 3 -regextype posix-extended -regex '\\./{_FILE}' -type f -printf '%P %s\\n' "
            "| while read -r path size; do "
            "printf 'file %s %s %s\\n' \"$path\" \"$size\" \"$(tail -c 22 \"$path\" | head -c 4 | od -An -tx1 "
            "| tr -d ' \\n')\"; done")


@dataclass(frozen=True)
class NodeListing:
    present: bool                                   # the root exists on the node
    tracker: int | None = None                      # the step latest_checkpointed_iteration.txt names
    whole: frozenset[str] = frozenset()             # step files that end as a zip archive ends
    cut: frozenset[str] = frozenset()               # step files that do not (being written, or cut short)


def parse_listing(output: str) -> NodeListing:
    lines = output.splitlines()
    if lines[:1] == ["absent"]:
        return NodeListing(False)
    if not lines or not lines[0].startswith("tracker"):
        raise ParseError("checkpoint listing", f"no tracker line: {output[:120]!r}")
    digits = lines[0][len("tracker"):].strip()
    whole, cut = set(), set()
    for line in lines[1:]:
        found = _LINE.fullmatch(line)
        if found is None:
            raise ParseError("checkpoint listing", f"unexpected line {line[:120]!r}")
        ends_whole = found["end"] == ZIP_END and int(found["size"]) >= 22
        (whole if ends_whole else cut).add(found["path"])
    return NodeListing(True, int(digits) if digits else None, frozenset(whole), frozenset(cut))


@dataclass
class SavedStep:
    step: int
    missing: list[str] = field(default_factory=list)      # why it is not complete (empty: complete)
    holders: dict[str, list[int]] = field(default_factory=dict)   # node -> the ranks whose model shard it holds

    @property
    def complete(self) -> bool:
        return not self.missing


def _ranges(ranks: list[int]) -> str:
    spans, start = [], None
    for i, rank in enumerate(ranks):
        start = rank if start is None else start
        if i + 1 == len(ranks) or ranks[i + 1] != rank + 1:
            spans.append(f"{start}" if start == rank else f"{start}-{rank}")
            start = None
    return ",".join(spans)


def _step_of(path: str) -> int:
    return int(path.split("/", 1)[0][len("global_step_"):])


def _missing(step: int, world: int, seen: set[str], trackers: list[int]) -> list[str]:
    """What keeps `step` from being complete, given every whole file the nodes hold (`seen`)."""
    missing = []
    for kind in KINDS:
        absent = [rank for rank in range(world)
                  if f"global_step_{step}/actor/{kind}_world_size_{world}_rank_{rank}.pt" not in seen]
        if absent:
            missing.append(f"{kind} shard of rank(s) {_ranges(absent)}")
    if f"global_step_{step}/data.pt" not in seen:
        missing.append("data.pt")
    if not trackers or step > max(trackers):
        missing.append(f"newer than {TRACKER} ({max(trackers) if trackers else 'on no node'})")
    return missing


def _model_ranks(files: frozenset[str], step: int, world: int) -> list[int]:
    return sorted(int(m[4]) for path in files if (m := _SHARD.fullmatch(path)) and int(m[1]) == step
                  and m[2] == "model" and int(m[3]) == world)


def saved_steps(listings: dict[str, NodeListing], world: int) -> list[SavedStep]:
    """Every step any node holds a file of, oldest first, each with what keeps it from being complete for a run of
    `world` ranks (a rank's file absent or cut short on every node, data.pt, or a step newer than every tracker)."""
    seen = set().union(*(listing.whole for listing in listings.values()))
    everything = seen.union(*(listing.cut for listing in listings.values()))
    trackers = [listing.tracker for listing in listings.values() if listing.tracker is not None]
    found = []
    for step in sorted({_step_of(path) for path in everything}):
        holders = {node: ranks for node, listing in listings.items()
                   if (ranks := _model_ranks(listing.whole, step, world))}
        found.append(SavedStep(step, _missing(step, world, seen, trackers), holders))
    return found


def last_complete(steps: list[SavedStep]) -> SavedStep | None:
    complete = [s for s in steps if s.complete]
    return complete[-1] if complete else None


def holders_text(step: SavedStep) -> str:
    return ", ".join(f"ranks {_ranges(ranks)} on {node}" for node, ranks in sorted(step.holders.items(),
                                                                                  key=lambda item: item[1][0]))


def describe(steps: list[SavedStep]) -> str:
    """One line: the last complete step (and where its ranks' shards are) and what keeps any newer one from being
    complete."""
    last = last_complete(steps)
    newer = [s for s in steps if last is None or s.step > last.step]
    said = f"last complete step {last.step} ({holders_text(last)})" if last else "no complete step"
    if newer:
        said += "; " + "; ".join(f"step {s.step} incomplete: {', '.join(s.missing)}" for s in newer[-2:])
    return said


def read_listings(hosts: list, root: str) -> tuple[dict[str, NodeListing], dict[str, str]]:
    """Each node's listing of the run's checkpoint directory (one SSH command per node, in parallel), and the nodes
    that could not be read, each with why."""
    from dapo_ops.fleet.ssh import parsed_on_each

    return parsed_on_each(hosts, listing_command(root), parse_listing)


def read_saved_steps(hosts: list, root: str, world: int) -> tuple[list[SavedStep], dict[str, str]]:
    """The run's saved steps as its nodes hold them now, and the nodes that could not be read (their files count
    as absent)."""
    listings, unread = read_listings(hosts, root)
    return saved_steps(listings, world), unread


def prune_others(hosts: list, root: str, world: int, keep: int) -> tuple[list[SavedStep], dict[str, list[int]]]:
    """Remove on every node the step directories verl leaves beyond the `keep` newest complete steps (prune_plan),
    only when every node could be read. Returns the steps as found, and what was removed where."""
    from dapo_ops.fleet.ssh import QUICK, fan_out, run_on

    listings, unread = read_listings(hosts, root)
    if unread:
        return saved_steps(listings, world), {}
    plan = prune_plan(listings, world, keep)
    by_name = {h.name: h for h in hosts}
    results = fan_out([by_name[n] for n in plan], lambda host: run_on(host, prune_command(root, plan[host.name]),
                                                                      timeout=QUICK)).results
    done = {node: steps for node, steps in plan.items()
            if node in results and results[node].failure is None and results[node].exit_code == 0}
    return saved_steps(listings, world), done


def prune_plan(listings: dict[str, NodeListing], world: int, keep: int) -> dict[str, list[int]]:
    """node -> the steps whose `actor/` directory to remove there: every step older than the oldest of the last
    `keep` complete ones (none while fewer are complete; never a newer step, which may be being written). verl
    prunes on rank 0's node only (fsdp_checkpoint_manager.py save_checkpoint, lines 204-214), so on node-local disks
    the other nodes would keep every step they ever saved."""
    complete = [s.step for s in saved_steps(listings, world) if s.complete]
    if keep < 1 or len(complete) < keep:
        return {}
    boundary = complete[-keep]
    plan = {}
    for node, listing in listings.items():
        old = sorted({_step_of(path) for path in listing.whole | listing.cut if "/actor/" in path} - {boundary})
        old = [step for step in old if step < boundary]
        if old:
            plan[node] = old
    return plan


def prune_command(root: str, steps: list[int]) -> str:
    return "; ".join(f"rm -rf -- {shlex.quote(f'{root}/global_step_{step}/actor')}" for step in steps)
