"""`dapo-sim`: the simulated fleet's command, beside the product (it may import dapo_ops; dapo_ops never imports
it). Errors map to exit codes as `dapo-ops`'s do (dapo_ops.cli.run)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from dapo_ops import __version__
from dapo_ops.cli import run
from dapo_ops.cli.options import job_file_argument, json_option
from dapo_ops.cli.output import Output
from dapo_ops.errors import DapoError
from dapo_sim.netns import MAX_LINK_MBIT


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dapo-sim")
def sim() -> None:
    """The simulated Ascend fleet (network namespaces + sshd + emulated npu-smi/hccn_tool/installers)."""


@sim.command("up")
@click.option("--nodes", type=int, default=2, show_default=True, help="Number of nodes.")
@click.option("--npus-per-node", type=int, default=16, show_default=True,
              help="NPUs on each node: 8 models an Atlas 800T A2, 16 an Atlas 200T A2 Box16.")
@click.option("--fault", "faults", multiple=True, metavar="SPEC",
              help="Fault knob NODE[.npuK]:KNOB[=VALUE], repeatable (see `dapo-sim faults`).")
@click.option("--provisioned", is_flag=True, help="Start every node with the pinned HDK and CANN installed.")
@click.option("--ssh-user", default="root", show_default=True, metavar="NAME",
              help="The only user the nodes let in over SSH; one other than root has passwordless sudo, and the "
                   "inventory says ansible_become.")
@click.option("--bastion", is_flag=True, help="The nodes let SSH in only from a jump host, which the inventory names "
                                              "(ProxyJump, in the ssh config file it passes with -F).")
@click.option("--ssh-key", default="", metavar="PRIVATE_KEY",
              help="The controller's key the nodes accept, PRIVATE_KEY.pub beside it (default: the simulator's "
                   "own); one with a passphrase needs ssh-agent, for Ansible and dapo-ops alike.")
@click.option("--link-mbit", type=click.IntRange(1, MAX_LINK_MBIT), default=None, metavar="N",
              help="Limit the controller's uplink and each node's management link to N Mbit/s each way (tc tbf), "
                   "so that copying files to the nodes is bound by the network (default: unlimited).")
@json_option
def sim_up(nodes: int, npus_per_node: int, faults: tuple[str, ...], provisioned: bool, ssh_user: str, bastion: bool,
           ssh_key: str, link_mbit: int | None, as_json: bool) -> None:
    """Bring the simulated fleet up (idempotent)."""
    from dapo_sim.fleet import FleetSpec, SimFleet

    out = Output(as_json)
    spec = FleetSpec(nodes=nodes, npus_per_node=npus_per_node, faults=tuple(faults), provisioned=provisioned,
                     ssh_user=ssh_user, bastion=bastion, ssh_key=str(Path(ssh_key).resolve()) if ssh_key else "",
                     link_mbit=link_mbit)
    SimFleet.validate_spec(spec)
    fleet = SimFleet(log=out.note)
    state = fleet.up(spec)
    status = fleet.status()
    _print_status(out, status)
    if state.up_seconds is not None:
        out.info(f"up in {state.up_seconds:.1f} s; inventory {status['inventory']}")
        out.info(f"for ansible-playbook and dapo-ops without -i: export ANSIBLE_INVENTORY={status['inventory']}")
    out.document(status)


@sim.command("status")
@json_option
def sim_status(as_json: bool) -> None:
    """Show the simulated fleet; exit 1 when it is not (fully) up."""
    from dapo_sim.fleet import SimFleet

    out = Output(as_json)
    status = SimFleet().status()
    _print_status(out, status)
    out.document(status)
    if not status["up"]:
        raise DapoError("the simulated fleet is not up" + (
            f" (leftovers not recorded by this simulator, which `sim down` leaves alone: {status['leftovers']})"
            if status.get("leftovers") else ""))


@sim.command("down")
@json_option
def sim_down(as_json: bool) -> None:
    """Tear the simulated fleet down: every namespace, process and link that `sim up` recorded making."""
    from dapo_sim.fleet import SimFleet

    out = Output(as_json)
    removed = SimFleet().down()
    out.info(f"removed {len(removed['netns'])} namespace(s), {len(removed['links'])} link(s), "
             f"{len(removed['processes'])} process(es)")
    out.document(removed)


@sim.command("stage")
@job_file_argument
@click.option("--skip", multiple=True, metavar="NODE", help="Leave this node without the files (repeatable).")
@click.option("--weights-mib", type=click.IntRange(0, 65536), default=0, metavar="N",
              help="Weight shards of about N MiB in all, random bytes (for benchmarks of staging; default: tiny).")
def sim_stage(job_file: Path, skip: tuple[str, ...], weights_mib: int) -> None:
    """Generate a job's model (config.json, a small real tokenizer, safetensors shards) and DAPO-shaped parquet data,
    and put them on the simulated nodes with `dapo-ops stage`."""
    from dapo_ops.job.spec import load_spec
    from dapo_sim.fleet import SimFleet
    from dapo_sim.staging import stage_job

    fleet = SimFleet()
    if fleet.load_state() is None:
        raise DapoError("no simulated fleet is up (dapo-sim up)")
    out = Output(False)
    result = stage_job(load_spec(job_file), fleet.inventory_file, fleet.state_dir / "staged", tuple(skip),
                       weights_mib << 20, out.note)
    failed = [name for name, node in result.nodes.items() if not node["ok"]]
    if failed:
        raise DapoError(f"staging failed on {', '.join(failed)}: {result.nodes[failed[0]]['problem']}")
    out.info(f"staged {result.files} file(s) on {', '.join(result.nodes) or 'no node'} ({result.mode}, "
             f"{result.seconds:.1f} s)")


@sim.command("faults")
def sim_faults() -> None:
    """List the fault knobs."""
    from dapo_sim.hwmodel import NODE_KNOBS, NPU_KNOBS

    table = Table(title="fault knobs: --fault NODE[.npuK]:KNOB[=VALUE]")
    for column in ("scope", "knob", "meaning"):
        table.add_column(column)
    for scope, knobs in (("node", NODE_KNOBS), ("npu", NPU_KNOBS)):
        for knob, meaning in knobs.items():
            table.add_row(scope, knob, meaning)
    Output(False).table(table)


def _print_status(out: Output, status: dict) -> None:
    if not status.get("nodes"):
        out.info("no simulated fleet is up")
        return
    from dapo_sim.hwmodel import product_name

    npus, mbit = ((status.get("spec") or {}).get(key) for key in ("npus_per_node", "link_mbit"))
    kind = f"{npus} NPU per node ({product_name(npus)}), " if npus else ""
    kind += f"links {mbit} Mbit/s, " if mbit else ""
    table = Table(title=f"simulated fleet — {kind}mirror {status['mirror']['url']}")
    for column in ("node", "address", "training network", "namespace", "sshd"):
        table.add_column(column)
    for node in status["nodes"]:
        ok = "[green]up[/green]" if node["sshd"] else "[red]down[/red]"
        table.add_row(node["name"], node["ip"], f"{node.get('data_nic')} {node.get('data_ip')}", node["netns"], ok)
    out.console.print(table)


def main(argv: list[str] | None = None) -> int:
    return run(sim, "dapo-sim", argv)
