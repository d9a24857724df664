"""How `dapo-ops stage` gets the bytes to the nodes: the controller sends the stream once, into the first node of a
chain; each node writes what it lacks and passes the whole stream on to the next over node-to-node SSH (the run's
own key, docs/stage.md). Every link carries the bytes once, so N nodes take about as long as one. When the chain
cannot be set up (no host key for a node, sshd refusing the key, a firewall between nodes), the controller sends to
each node itself, N copies through its uplink, and says why."""

from __future__ import annotations

import os
import tempfile
import threading
from contextlib import ExitStack
from secrets import token_hex
from typing import Callable

import paramiko

from dapo_ops.errors import DapoError
from dapo_ops.fleet.known_hosts import parse_known_hosts
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.stage import keys, relay
from dapo_ops.stage import nodes as node_ops
from dapo_ops.stage.nodes import Node, each
from dapo_ops.stage.stream import Chain, ChainLost, Fanout, pump

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


def allowed(the_plan, node: Node) -> dict[str, str]:
    return {f.target: f.sha256 for f in the_plan.needs.get(node.name, [])}


def set_up_pipeline(the_plan, receivers: list[Node], cleanup: ExitStack, warn: Callable[[str], None]) -> str:
    """Each receiver's hop (the run's key and the next node's host key where one follows), the key let in on every
    node but the first (taken out again at the end, whatever happens). Returns why a pipeline cannot be built, or
    ""."""
    key = keys.new_key(token_hex(8))
    hosts_known = [known_lines(n.host) for n in receivers[1:]]
    missing = next((why for why in hosts_known if isinstance(why, str)), "")
    if missing:
        return missing
    following = dict(zip([n.name for n in receivers], receivers[1:]))
    known = dict(zip([n.name for n in receivers], hosts_known))

    def take_out(node: Node) -> None:
        why = node_ops.unauthorize(node, key)
        if why:
            warn(f"{node.name}: the run's key could not be taken out of authorized_keys ({why}): remove the line "
                 f"ending {key.comment} yourself")

    previous = dict(zip([n.name for n in receivers[1:]], receivers))
    try:
        each(receivers, lambda n: node_ops.install_hop(n, key, following.get(n.name), known.get(n.name, []),
                                                       allowed(the_plan, n)))
        for node in receivers[1:]:
            cleanup.callback(take_out, node)
        each(receivers[1:], lambda n: node_ops.authorize(n, key, previous[n.name]))
    except (DapoError, OSError, paramiko.SSHException) as exc:
        return f"setting up the chain failed: {exc}"
    return ""


def probe(receivers: list[Node]) -> str:
    """An empty stream through the whole chain: "" when every node reports its end, else why not."""
    chain = Chain(receivers[0], [n.name for n in receivers], lambda event: None)
    try:
        chain.open()
        chain.write(relay.END)
        chain.close()
    except (DapoError, OSError, paramiko.SSHException) as exc:
        return str(exc)
    finally:
        chain.abort()
    done = chain.done()
    silent = [n.name for n in receivers if n.name not in done]
    if silent:
        return f"{silent[0]} did not answer through the chain ({chain.why()})"
    return ""


def send(the_plan, nodes: list[Node], source_node: Node | None, result, hooks, cleanup: ExitStack) -> None:
    receivers = [n for n in nodes if n.name in the_plan.receivers]
    why = ""
    if len(receivers) > 1:
        why = set_up_pipeline(the_plan, receivers, cleanup, hooks.say) or probe(receivers)
    if len(receivers) == 1 or why:
        each(receivers, lambda n: node_ops.install_hop(n, None, None, [], allowed(the_plan, n)))
    result.mode = "one node" if len(receivers) == 1 else "direct" if why else "pipeline"
    result.why_direct = why
    if why:
        hooks.say(f"the nodes cannot pass the files on ({why}): the controller sends to each node itself")
    frames = the_plan.frames()
    if result.mode == "direct":
        chains = [Chain(n, [n.name], hooks.event, [f for f in frames if n.name in f["to"]]) for n in receivers]
    else:
        chains = [Chain(receivers[0], [n.name for n in receivers], hooks.event, frames)]
    hooks.start({n.name: the_plan.bytes_for(n.name) for n in receivers})
    stream(chains, source_node, frames, result)


def _from_controller(chains: list[Chain]) -> int:
    """Each chain its own frames from the controller's files, at once; the bytes sent."""
    sent = [0] * len(chains)

    def feed(index: int, chain: Chain) -> None:
        def write(data: bytes) -> None:
            chain.write(data)
            sent[index] += len(data)
        try:
            relay.write_frames(chain.frames, write)
        except ChainLost as exc:
            chain.lost = str(exc)
        except OSError as exc:
            chain.lost = f"reading the source failed: {exc}"

    threads = [threading.Thread(target=feed, args=(i, c), daemon=True) for i, c in enumerate(chains)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(sent)


def stream(chains: list[Chain], source_node: Node | None, frames: list[dict], result) -> None:
    try:
        for chain in chains:
            chain.open()
        if source_node is None:
            result.sent_bytes = _from_controller(chains)
        else:
            fanout = Fanout(chains)
            try:
                from_source(source_node, frames, fanout)
            finally:
                result.sent_bytes = fanout.sent
        for chain in chains:
            if not chain.lost:
                chain.close()
    except BaseException:
        for chain in chains:
            chain.abort()
        raise
    for chain in chains:
        report(chain, result)


def report(chain: Chain, result) -> None:
    done = chain.done()
    for name in chain.members:
        event = done.get(name)
        if event is None:
            why = chain.lost or f"no report from {name}: {chain.why()}"
            result.nodes[name] = {"ok": False, "problem": why}
            continue
        failed = event.get("failed") or []
        problem = (f"{len(failed)} file(s) failed: " + ", ".join(failed) if failed else
                   "" if event.get("complete") else chain.lost or "the stream ended early")
        result.nodes[name] = {"ok": not problem, "problem": problem, "files": event.get("files", 0),
                              "bytes": event.get("bytes", 0)}
    file_problems = [e for e in chain.events if e.get("event") == "file" and not e.get("ok")]
    for event in file_problems:
        node = result.nodes.get(event.get("node"))
        if node is not None and event.get("why") and event["why"] not in node["problem"]:
            node["problem"] += f" ({event.get('target')}: {event['why']})"


def from_source(source_node: Node, frames: list[dict], fanout: Fanout) -> None:
    """The source node's relay reads its files into the stream; the controller passes it on as it comes."""
    import json

    transport = source_node.conn.client.get_transport()
    channel = transport.open_session(window_size=16 << 20)
    try:
        channel.settimeout(300)
        channel.exec_command(source_node.host.command(source_node.relay("send")))
        channel.sendall(json.dumps(frames).encode())
        channel.shutdown_write()
        pump(source_node, channel, fanout)
    finally:
        channel.close()
