"""`dapo-ops stage`'s stream (SSH edge): the controller writes the frame stream once into each chain's first node
(an exec channel running its relay), and reads the chain's report lines back from it."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Callable

from dapo_ops.errors import DapoError
from dapo_ops.stage import relay
from dapo_ops.stage.nodes import Node

WINDOW = 16 << 20        # the channel's receive window: a chunk in flight per round trip is not enough
OPEN_TIMEOUT = 30.0


def parse_event(line: str) -> dict | None:
    """A relay report line -> its event; None for anything else."""
    if not line.startswith(relay.EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(relay.EVENT_PREFIX):])
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


@dataclass
class Chain:
    """One chain of nodes fed by the controller: the first node's relay, and what the chain reported."""
    head: Node
    members: list[str]
    on_event: Callable[[dict], None]
    events: list[dict] = field(default_factory=list)
    stderr: bytearray = field(default_factory=bytearray)
    channel: object = None
    exit_code: int | None = None

    def open(self) -> None:
        transport = self.head.conn.client.get_transport()
        self.channel = transport.open_session(window_size=WINDOW, timeout=OPEN_TIMEOUT)
        self.channel.exec_command(self.head.host.command(self.head.relay("recv", f"{self.head.run_dir}/hop.json")))
        self._readers = [threading.Thread(target=self._read_events, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_events(self) -> None:
        for raw in self.channel.makefile("rb"):
            event = parse_event(raw.decode(errors="replace"))
            if event is not None:
                self.events.append(event)
                self.on_event(event)

    def _read_stderr(self) -> None:
        stream = self.channel.makefile_stderr("rb")
        for raw in stream:
            self.stderr += raw[-2000:]

    def write(self, data: bytes) -> None:
        if self.channel.exit_status_ready() or self.channel.closed:
            raise DapoError(f"{self.head.name}'s relay stopped taking the stream: {self.why()}")
        self.channel.sendall(data)

    def close(self, timeout: float = 120.0) -> None:
        """End the input, wait for the chain's last report and the first node's exit status."""
        self.channel.shutdown_write()
        for reader in self._readers:
            reader.join(timeout)
        self.exit_code = self.channel.recv_exit_status()
        self.channel.close()

    def abort(self) -> None:
        if self.channel is not None:
            self.channel.close()

    def why(self) -> str:
        text = self.stderr.decode(errors="replace").strip().splitlines()
        return " | ".join(text[-3:]) or "no message"

    def done(self) -> dict[str, dict]:
        """node -> its "done" event, for the members that sent one."""
        return {e["node"]: e for e in self.events if e.get("event") == "done"}


class Fanout:
    """write(bytes) into every chain (the star case: one chain per node)."""

    def __init__(self, chains: list[Chain]):
        self.chains = chains
        self.sent = 0

    def write(self, data: bytes) -> None:
        for chain in self.chains:
            chain.write(data)
        self.sent += len(data)


def pump(source_channel, out: Fanout, chunk: int = relay.CHUNK) -> None:
    """A source node's `relay.py send` output into the chains, as it comes."""
    while True:
        data = source_channel.recv(chunk)
        if not data:
            break
        out.write(data)
    code = source_channel.recv_exit_status()
    if code != 0:
        raise DapoError(f"the source node's relay failed (exit {code})")
