"""How `dapo-ops stage` gets the bytes to the nodes: the controller sends the stream once, into the first node of a
chain; each node writes what it lacks and passes the whole stream on to the next over node-to-node SSH (the run's
own key, docs/stage.md). Every link carries the bytes once, so N nodes take about as long as one. When the chain
cannot be set up (no host key for a node, sshd refusing the key, a firewall between nodes), the controller sends to
each node itself, N copies through its uplink, and says why."""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack
from secrets import token_hex

import paramiko

from dapo_ops.errors import DapoError
from dapo_ops.fleet.known_hosts import parse_known_hosts
from dapo_ops.fleet.ssh import HostSpec, fan_out
from dapo_ops.stage import keys, relay
from dapo_ops.stage import nodes as node_ops
from dapo_ops.stage.nodes import Node
from dapo_ops.stage.stream import Chain, Fanout, pump

PROBE_TIMEOUT = 60.0


def known_lines(host: HostSpec) -> list[str] | str:
    """The host's keys from the controller's known_hosts as plain lines for its address, or why there are none."""
    name = keys.known_hosts_name(host.address, host.port)
    try:
        known = parse_known_hosts(host.known_hosts.read_text(), str(host.known_hosts))
    except OSError as exc:
        return f"cannot read {host.known_hosts}: {exc.strerror}"
    handle, plain = tempfile.mkstemp(prefix="dapo-stage-known-")
    try:
        with os.fdopen(handle, "w") as out:
            out.write("\n".join(known.plain) + "\n")
        found = paramiko.HostKeys(plain).lookup(name) or {}
    finally:
        os.unlink(plain)
    lines = [f"{name} {key.get_name()} {key.get_base64()}" for key in found.values()
             if key.get_base64() not in known.revoked]
    return lines or f"{host.known_hosts} has no host key for {name} ({host.name})"


def _each(nodes: list[Node], work) -> None:
    by_name = {n.name: n for n in nodes}
    fan_out([n.host for n in nodes], lambda host: work(by_name[host.name]))


def set_up_pipeline(receivers: list[Node], cleanup: ExitStack) -> str:
    """Each receiver's hop (the run's key and the next node's host key where one follows), the key let in on every
    node but the first (taken out again at the end). Returns why a pipeline cannot be built, or ""."""
    key = keys.new_key(token_hex(8))
    hosts_known = [known_lines(n.host) for n in receivers[1:]]
    missing = next((why for why in hosts_known if isinstance(why, str)), "")
    if missing:
        return missing
    nexts = receivers[1:] + [None]
    _each(receivers, lambda n: node_ops.install_hop(n, key, nexts[receivers.index(n)],
                                                    hosts_known[receivers.index(n)] if nexts[receivers.index(n)]
                                                    else []))
    for node in receivers[1:]:
        cleanup.callback(node_ops.unauthorize, node, key)
    _each(receivers[1:], lambda n: node_ops.authorize(n, key))
    return ""


def probe(receivers: list[Node]) -> str:
    """An empty stream through the whole chain: "" when every node reports its end, else why not."""
    chain = Chain(receivers[0], [n.name for n in receivers], lambda event: None)
    chain.open()
    try:
        chain.write(relay.END)
        chain.close(PROBE_TIMEOUT)
    finally:
        chain.abort()
    done = chain.done()
    silent = [n.name for n in receivers if n.name not in done]
    if silent:
        return f"{silent[0]} did not answer through the chain ({chain.why()})"
    return ""


def single_hops(receivers: list[Node]) -> None:
    _each(receivers, lambda n: node_ops.install_hop(n, None, None, []))


def send(the_plan, nodes: list[Node], source_node: Node | None, result, hooks, cleanup: ExitStack) -> None:
    receivers = [n for n in nodes if n.name in the_plan.receivers]
    why = ""
    if len(receivers) > 1:
        why = set_up_pipeline(receivers, cleanup) or probe(receivers)
    if len(receivers) == 1 or why:
        single_hops(receivers)
    result.mode = "one node" if len(receivers) == 1 else "direct" if why else "pipeline"
    result.why_direct = why
    if why:
        hooks.say(f"the nodes cannot pass the files on ({why}): the controller sends to each node itself")
    groups = [receivers] if result.mode != "direct" else [[n] for n in receivers]
    chains = [Chain(group[0], [n.name for n in group], hooks.event) for group in groups]
    hooks.start({n.name: the_plan.bytes_for(n.name) for n in receivers})
    stream(the_plan, chains, source_node, result)


def stream(the_plan, chains: list[Chain], source_node: Node | None, result) -> None:
    frames = the_plan.frames()
    fanout = Fanout(chains)
    try:
        for chain in chains:
            chain.open()
        if source_node is None:
            relay.write_frames(frames, fanout.write)
        else:
            from_source(source_node, frames, fanout)
        for chain in chains:
            chain.close()
    except BaseException:
        for chain in chains:
            chain.abort()
        raise
    finally:
        result.sent_bytes = fanout.sent * len(chains)
    for chain in chains:
        done = chain.done()
        for name in chain.members:
            report = done.get(name)
            if report is None:
                result.nodes[name] = {"ok": False, "problem": f"no report from {name}: {chain.why()}"}
            else:
                failed = report.get("failed") or []
                problem = ("sha256 differed on arrival: " + ", ".join(failed) if failed else
                           "" if report.get("complete") else "the stream ended early")
                result.nodes[name] = {"ok": not problem, "problem": problem, "files": report.get("files", 0),
                                      "bytes": report.get("bytes", 0)}


def from_source(source_node: Node, frames: list[dict], fanout: Fanout) -> None:
    """The source node's relay reads its files into the stream; the controller passes it on as it comes."""
    import json

    transport = source_node.conn.client.get_transport()
    channel = transport.open_session(window_size=16 << 20)
    try:
        channel.exec_command(source_node.host.command(source_node.relay("send")))
        channel.sendall(json.dumps(frames).encode())
        channel.shutdown_write()
        pump(channel, fanout)
    finally:
        channel.close()
    if fanout.sent == 0:
        raise DapoError(f"{source_node.name} sent nothing")
