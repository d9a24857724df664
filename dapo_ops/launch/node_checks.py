"""What launch checks on every node of a run before it changes anything: that each answers with its verified host
key, that each has the host memory the job needs (dapo_ops/job/memory.py) in its MemTotal and the free space its
checkpoints need (dapo_ops/job/checkpoints.py), and (once Ray's leftovers are stopped) that nothing else holds a port
its Ray will bind."""

from __future__ import annotations

from dapo_ops.errors import DapoError, UsageError
from dapo_ops.fleet.ssh import HostSpec, QUICK, fan_out, parsed_on_each, run_on
from dapo_ops.launch import cluster
from dapo_ops.launch.steps import Steps
from dapo_ops.ray_listeners import LISTENERS_COMMAND, node_ports, parse_listeners, port_conflicts
from dapo_ops.ray_ports import RayPorts
from dapo_ops.model.variables import RAY_PORTS


def verify_host_keys(hosts: list[HostSpec], timeout: float = QUICK) -> None:
    """Every node of the run answers with its verified host key before anything changes on any of them
    (--force and --no-audit too): a node refused by its key fails the launch here, with nothing touched."""
    results = fan_out(hosts, lambda host: run_on(host, "true", timeout=timeout)).results
    failed = [results[h.name].error if h.name in results else f"{h.name}: no answer" for h in hosts
              if h.name not in results or results[h.name].failure is not None]
    if failed:
        raise cluster.LaunchError("; ".join(failed))


def check_host_memory(hosts: list[HostSpec], need_gib: float, steps: Steps, timeout: float = QUICK) -> str:
    """Each node's MemTotal against the job's host memory per node (dapo_ops/job/memory.py), before any change: a
    node short of it is a UsageError naming the node, the need and what it has; one within 10% a note."""
    from dapo_ops.audit.facts.host_memory import COMMAND, parse
    from dapo_ops.job.memory import host_memory_problems

    totals, unread = parsed_on_each(hosts, COMMAND, lambda out: parse(out)["mem_total_gib"], timeout)
    if unread:
        raise DapoError("; ".join(f"{name}: cannot read /proc/meminfo: {why}" for name, why in unread.items()))
    has = {host.name: totals[host.name] for host in hosts}
    errors, warnings = host_memory_problems(need_gib, has)
    if errors:
        raise UsageError(errors[0] + (f" (and {len(errors) - 1} more node(s))" if len(errors) > 1 else ""))
    for warning in warnings:
        steps.note(warning)
    return ", ".join(f"{name} {gib:.0f} GiB" for name, gib in has.items())


def check_ray_ports(hosts: list[HostSpec], ports: RayPorts, timeout: float = QUICK) -> None:
    """Once the leftovers are stopped, nothing may hold a port the node's Ray will bind: a local user there would
    get what Ray's clients send (on the head's dashboard port, the run's token). LaunchError naming every node,
    port and owner (ray_listeners.py)."""
    results = fan_out(hosts, lambda host: run_on(host, LISTENERS_COMMAND, timeout=timeout)).results
    problems = []
    for index, host in enumerate(hosts):
        result = results.get(host.name)
        if result is None or result.failure is not None or result.exit_code != 0:
            problems.append(f"{host.name}: cannot list its listening sockets (`{LISTENERS_COMMAND}`): "
                            + (result.error if result is not None and result.failure is not None else
                               (result.stderr.strip()[-200:] if result is not None else "no answer")))
            continue
        problems += port_conflicts(parse_listeners(result.stdout), node_ports(ports, head=index == 0), host.name)
    if problems:
        raise cluster.LaunchError("; ".join(problems) + ": stop what holds them, or move Ray's ports "
                                  f"({RAY_PORTS} in the inventory)")


def space_command(directory: str) -> str:
    """The free space of the filesystem that holds (or will hold) `directory`: df of its nearest existing ancestor."""
    from dapo_ops.fleet.disk import space_command as command

    return command([directory])


def parse_space(output: str) -> tuple[str, float]:
    """(the directory df looked at, its filesystem's available GiB) from space_command's output."""
    from dapo_ops.fleet.disk import parse_space as parse

    space = parse(output, 1)[0]
    return space.directory, space.available / 2**30


def check_checkpoint_space(hosts: list[HostSpec], directory: str, step_gib: float, keep: int,
                           timeout: float = QUICK) -> tuple[str, bool]:
    """Each node's checkpoint filesystem must hold keep + 1 saved steps of its ranks (the steps kept, and one more:
    a restarted run never prunes the steps written before it; docs/checkpoints.md), a filesystem every node shares
    every node's. UsageError naming the node, the need and what is free. Returns what it found, and whether the
    filesystem is one every node shares."""
    from dapo_ops.fleet.shared_dir import is_shared

    free, unread = parsed_on_each(hosts, space_command(directory), parse_space, timeout)
    if unread:
        raise DapoError("; ".join(f"{name}: cannot read the free space under {directory}: {why}"
                                  for name, why in unread.items()))
    shared = is_shared(hosts, free[hosts[0].name][0])
    need = (keep + 1) * step_gib * (len(hosts) if shared else 1)
    short = [f"{name} has {gib:.0f} GiB free under {where}" for name, (where, gib) in free.items() if gib < need]
    if short:
        where = "the shared filesystem" if shared else "each node's filesystem"
        per = f"{step_gib:.0f} GiB per step" + (f" on each of {len(hosts)} nodes" if shared else "")
        raise UsageError(f"the checkpoints need {need:.0f} GiB on {where} of {directory} ({keep} kept + 1, {per}), "
                         f"but {'; '.join(short)}: free space, move trainer.checkpoint_dir, or lower "
                         "trainer.keep_checkpoints")
    return (("shared, " if shared else "") + ", ".join(f"{name} {gib:.0f} GiB free" for name, (_, gib) in free.items())
            + f"; {need:.0f} GiB needed"), shared
