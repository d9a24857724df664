"""`dapo-ops stage`: the job's model and data files on every node it will use (dapo_ops/stage/run.py)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                           TransferSpeedColumn)

from dapo_ops.cli.options import inventory_option, job_file_argument, json_option, require_positive
from dapo_ops.cli.output import Output
from dapo_ops.errors import DapoError


class NodeBars:
    """One progress bar per node (bytes written there, rate, ETA), fed by the relays' reports; off a terminal (a log,
    CI), one line per file written on a node instead."""

    def __init__(self, out: Output):
        self.out = out
        self.progress = Progress(TextColumn("{task.description:>12}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=out.console,
                                 disable=not out.console.is_terminal)
        self.tasks: dict[str, int] = {}

    def start(self, totals: dict[str, int]) -> None:
        self.progress.start()
        self.tasks = {name: self.progress.add_task(name, total=total) for name, total in totals.items()}

    def event(self, event: dict) -> None:
        if self.progress.disable and event.get("event") == "file":
            state = "written, sha256 checked" if event.get("ok") else f"FAILED: {event.get('why')}"
            self.out.note(f"{event.get('node')}: {event.get('target')} {state}")
        task = self.tasks.get(event.get("node"))
        if task is not None and event.get("event") in ("progress", "done") and isinstance(event.get("bytes"), int):
            self.progress.update(task, completed=event["bytes"])

    def stop(self) -> None:
        self.progress.stop()


@click.command()
@job_file_argument
@click.option("--model-from", metavar="SRC", help="The model directory: a controller path or NODE:PATH (default: the "
              "job's model.path on the controller).")
@click.option("--data-from", metavar="SRC", help="A directory holding the job's data files by name: a controller "
              "path or NODE:PATH (default: the job's own data paths on the controller).")
@inventory_option
@click.option("--nodes", type=int, help="How many inventory nodes the job uses (default: the job's cluster.nodes).")
@json_option
def stage(job_file: Path, model_from: str | None, data_from: str | None, inventory: Path | None, nodes: int | None,
          as_json: bool) -> None:
    """Put the job's model and data files on every node it uses, checked by sha256 there, sent about once."""
    from dapo_ops.inventory import load_inventory
    from dapo_ops.job.placement import job_hosts
    from dapo_ops.job.spec import load_spec
    from dapo_ops.stage.plan import human_bytes
    from dapo_ops.stage.run import Hooks, stage as run_stage
    from dapo_ops.stage.source import parse_source

    require_positive(nodes=nodes)
    out = Output(as_json)
    spec = load_spec(job_file)
    hosts = list(load_inventory(inventory).hosts)
    chosen = job_hosts(spec, hosts, nodes)
    names = [h.name for h in hosts]
    model_src = parse_source(model_from or spec.model.path, "--model-from", names)
    data_src = parse_source(data_from, "--data-from", names) if data_from else None
    bars = NodeBars(out)
    try:
        result = run_stage(spec, chosen, hosts, model_src, data_src, Hooks(out.note, bars.start, bars.event))
    finally:
        bars.stop()
    _print(out, result, human_bytes)
    out.document(result.__dict__)
    failed = [name for name, node in result.nodes.items() if not node["ok"]]
    if failed:
        raise DapoError(f"staging failed on {', '.join(failed)}: {result.nodes[failed[0]]['problem']}; a rerun "
                        "sends only what is still missing")


def _print(out: Output, result, human_bytes) -> None:
    if isinstance(result.overlong, dict):
        o = result.overlong
        out.info(f"overlong prompts: {o['over']} of {o['prompts']} training prompts are longer than "
                 f"data.max_prompt_length {o['limit']} tokens with the chat template (longest {o['longest']}); "
                 "verl's filter_overlong_prompts drops them")
    elif result.overlong:
        out.info(f"overlong prompts: {result.overlong}")
    if result.left_out:
        out.note(f"left out of the model directory (the job does not read them): {', '.join(result.left_out)}")
    for directory in result.shared:
        out.info(f"{directory} is shared by every node: its files are copied once")
    for name, node in result.nodes.items():
        if not node["ok"]:
            out.warning(f"{name}: {node['problem']}")
        elif node["sent_files"]:
            out.success(f"{name}: {node['sent_files']} file(s), {human_bytes(node['sent_bytes'])} written, sha256 "
                        f"checked; {node['in_place']} already in place")
        else:
            shared = f" (shared with {node['shared_from']})" if node["shared_from"] else ""
            out.success(f"{name}: all {node['files']} file(s) in place, sha256 checked{shared}")
    how = {"pipeline": "once, passed on from node to node", "direct": "to each node from the controller",
           "one node": "to the one node that lacked files"}
    if result.mode == "nothing to send":
        out.info(f"nothing to send: every file was in place ({result.seconds:.1f} s)")
    else:
        out.info(f"sent {human_bytes(result.sent_bytes)} from the controller, {how[result.mode]}, in "
                 f"{result.seconds:.1f} s")
