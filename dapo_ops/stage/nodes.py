"""`dapo-ops stage` on the nodes (SSH edge): one connection per node for the run, the relay pushed to a private
directory there and removed after, the nodes' copies hashed, free space read, the run's key put in place and taken
away."""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import paramiko
from fabric import Connection

from dapo_ops.errors import DapoError, ParseError
from dapo_ops.fleet import disk
from dapo_ops.fleet.ssh import QUICK, HostSpec, connect, fan_out, run
from dapo_ops.fleet.transfer import exchange, write_file
from dapo_ops.job import node_files
from dapo_ops.stage import keys, relay
from dapo_ops.stage.plan import Digest, parse_hashes

T = TypeVar("T")
RELAY_FILES = (Path(relay.__file__), Path(node_files.__file__))
HASH_RATE = 100 << 20      # bytes per second a node hashes at the least (sha256 of a local disk), for the timeout


@dataclass
class Node:
    host: HostSpec
    conn: Connection
    run_dir: str = ""

    @property
    def name(self) -> str:
        return self.host.name

    def relay(self, mode: str, *args: str) -> str:
        """The command line that runs the pushed relay (run it through self.host.command for become)."""
        return " ".join(["python3", shlex.quote(f"{self.run_dir}/relay.py"), mode, *map(shlex.quote, args)])

    def run(self, command: str, step: str, timeout: float = QUICK, login: bool = False) -> str:
        host = dataclasses.replace(self.host, become_user=None) if login else self.host
        return run(self.conn, host, command, timeout).raise_for(step)


def open_nodes(hosts: list[HostSpec]) -> list[Node]:
    """A connection to every host at once; SSHError naming the first that fails (the others are closed)."""
    opened = fan_out(hosts, lambda host: _try_connect(host)).results
    failed = [value for value in opened.values() if isinstance(value, Exception)]
    nodes = [Node(h, opened[h.name]) for h in hosts if not isinstance(opened.get(h.name), Exception)]
    if failed or len(nodes) < len(hosts):
        close_nodes(nodes)
        raise failed[0] if failed else DapoError("a node did not answer in time")
    return nodes


def each(nodes: list[Node], work: Callable[[Node], T]) -> dict[str, T]:
    """work(node) on every node at once; waits for every one of them (none is left running behind a failure), then
    raises the first failure, else returns node -> result."""
    by_name = {n.name: n for n in nodes}

    def guarded(host: HostSpec):
        try:
            return work(by_name[host.name]), None
        except Exception as exc:
            return None, exc

    results = fan_out([n.host for n in nodes], guarded).results
    failures = [exc for _, exc in results.values() if exc is not None]
    if failures:
        raise failures[0]
    if len(results) < len(nodes):
        raise DapoError("a node did not answer in time")
    return {name: value for name, (value, _) in results.items()}


def _try_connect(host: HostSpec):
    try:
        return connect(host)
    except DapoError as exc:
        return exc


def close_nodes(nodes: list[Node]) -> None:
    for node in nodes:
        node.conn.close()


def push_relay(node: Node) -> None:
    """A private directory (0700, mktemp) with the relay and node_files in it."""
    node.run_dir = node.run("umask 077 && mktemp -d /tmp/dapo-stage.XXXXXXXX", "make the stage directory").strip()
    if not node.run_dir.startswith("/tmp/dapo-stage."):
        raise DapoError(f"{node.name}: mktemp gave {node.run_dir!r}")
    for path in RELAY_FILES:
        write_file(node.conn, node.host, f"{node.run_dir}/{path.name}", path.read_bytes(), 0o600, QUICK)
    version = node.run("python3 -c 'import sys; print(sys.version_info >= (3, 8))'", "find python3")
    if version.strip() != "True":
        raise DapoError(f"{node.name}: stage runs a small standard-library program with python3, which must be "
                        "3.8 or later there")


def remove_run_dir(node: Node) -> None:
    if node.run_dir:
        run(node.conn, node.host, f"rm -rf -- {shlex.quote(node.run_dir)}", QUICK)


def hash_timeout(total_bytes: int) -> float:
    return QUICK + total_bytes / HASH_RATE


SOURCE_HASH_TIMEOUT = 900.0   # the source's sizes are not known before: how long its answer may pause (a 90 GB shard)


def hash_files(node: Node, paths: list[str], timeout: float) -> dict[str, Digest]:
    """The node's copies of `paths`, hashed there; `timeout` is how long its answer may pause."""
    if not paths:
        return {}
    try:
        code, out = exchange(node.conn, node.host, node.relay("hash"), json.dumps(paths).encode(), timeout)
    except (OSError, paramiko.SSHException) as exc:   # socket.timeout among them
        raise DapoError(f"{node.name}: hashing its copies got no answer ({exc or 'timed out'})") from None
    if code != 0:
        raise DapoError(f"{node.name}: hashing its copies failed (exit {code})")
    return parse_hashes(out.decode(errors="replace"))


def list_model(node: Node, model_dir: str) -> dict:
    out = node.run(node.relay("list", model_dir), "list the model directory")
    try:
        answer = json.loads(out)
        return {"files": list(answer["files"]), "left_out": list(answer["left_out"]),
                "problems": list(answer["problems"])}
    except (ValueError, KeyError, TypeError):
        raise ParseError("relay.py list", "not a listing", line=out[:200]) from None


def existing_ancestors(node: Node, directories: list[str]) -> dict[str, str]:
    """directory -> itself or its nearest ancestor that exists on the node (nothing is made)."""
    return disk.parse_nearest(node.run(disk.nearest_command(directories), "look for the job's directories"),
                              directories)


def free_space(node: Node, directories: list[str]) -> dict[str, tuple[str, int]]:
    """directory -> (its filesystem's mount point, available bytes), from df -P of its nearest existing ancestor."""
    spaces = disk.parse_space(node.run(disk.space_command(directories), "read the free space"), len(directories))
    return {d: (space.mount, space.available) for d, space in zip(directories, spaces)}


def install_hop(node: Node, key: keys.RunKey | None, next_node: Node | None, known_lines: list[str],
                allowed: dict[str, str]) -> None:
    """hop.json (the files this node may write: target -> sha256, and, when a node follows, how to reach it, with
    the run's key and that node's host key) in the node's run directory."""
    next_argv = None
    if next_node is not None:
        h = next_node.host
        next_argv = keys.hop_argv(node.run_dir, h.user, h.address, h.port)
        write_file(node.conn, node.host, f"{node.run_dir}/key", key.private_openssh, 0o600, QUICK)
        write_file(node.conn, node.host, f"{node.run_dir}/known_hosts", ("\n".join(known_lines) + "\n").encode(),
                   0o600, QUICK)
    config = {"name": node.name, "next": next_argv, "allowed": allowed}
    write_file(node.conn, node.host, f"{node.run_dir}/hop.json", json.dumps(config).encode(), 0o600, QUICK)


def authorize(node: Node, key: keys.RunKey, previous: Node) -> None:
    """Let the previous node in: the run's key, forced to run this node's relay, from its address."""
    forced = node.host.command(node.relay("recv", f"{node.run_dir}/hop.json"))
    line = keys.authorized_line(key, forced, previous.host.address)
    node.run(keys.authorize_command(line), "let the previous node in", login=True)


def unauthorize(node: Node, key: keys.RunKey) -> str:
    """Take the run's key out of the node's authorized_keys; "" or why it failed."""
    result = run(node.conn, dataclasses.replace(node.host, become_user=None), keys.unauthorize_command(key), QUICK)
    if result.failure is not None or result.exit_code != 0:
        return result.error or result.stderr.strip()[-200:] or f"exit {result.exit_code}"
    return ""
