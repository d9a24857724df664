"""`dapo-ops stage`'s stream (SSH edge): the controller writes the frame stream into each chain's first node (an
exec channel running its relay), and reads the chain's report lines back from it. A chain that stops taking the
stream, or stalls past STALL seconds, is dropped with its reason; the others go on."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Callable

import paramiko

from dapo_ops.errors import DapoError
from dapo_ops.stage import relay
from dapo_ops.stage.nodes import Node

WINDOW = 16 << 20        # the channel's receive window: a chunk in flight per round trip is not enough
OPEN_TIMEOUT = 30.0
STALL = 300.0            # seconds a chain may take no bytes (or the end may not come) before it is given up
KEEPALIVE = 10           # seconds between SSH keepalives on a node's connection while it streams


def parse_event(line: str) -> dict | None:
    """A relay report line -> its event; None for anything else."""
    if not line.startswith(relay.EVENT_PREFIX):
        return None
    try:
        event = json.loads(line[len(relay.EVENT_PREFIX):])
    except ValueError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


class ChainLost(DapoError):
    """A chain's first node stopped taking the stream."""


@dataclass
class Chain:
    """One chain of nodes fed by the controller: the first node's relay, and what the chain reported."""
    head: Node
    members: list[str]
    on_event: Callable[[dict], None]
    frames: list[dict] = field(default_factory=list)    # what this chain is sent (direct mode: its node's own)
    events: list[dict] = field(default_factory=list)
    stderr: bytearray = field(default_factory=bytearray)
    channel: object = None
    exit_code: int | None = None
    lost: str = ""                                       # why the chain was given up

    def open(self) -> None:
        transport = self.head.conn.client.get_transport()
        transport.set_keepalive(KEEPALIVE)
        try:
            self.channel = transport.open_session(window_size=WINDOW, timeout=OPEN_TIMEOUT)
            self.channel.settimeout(STALL)
            self.channel.exec_command(self.head.host.command(self.head.relay("recv",
                                                                             f"{self.head.run_dir}/hop.json")))
        except (paramiko.SSHException, OSError) as exc:
            raise ChainLost(f"{self.head.name}: cannot start its relay: {exc}") from None
        self._readers = [threading.Thread(target=self._read_events, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_events(self) -> None:
        try:
            for raw in self.channel.makefile("rb"):
                event = parse_event(raw.decode(errors="replace"))
                if event is None:
                    continue
                self.events.append(event)
                try:
                    self.on_event(event)
                except Exception:  # a display that fails must not stop the reports being drained
                    pass
        except (OSError, paramiko.SSHException):   # a stall: close() says so
            return

    def _read_stderr(self) -> None:
        try:
            for raw in self.channel.makefile_stderr("rb"):
                self.stderr += raw[-2000:]
                del self.stderr[:-4000]
        except (OSError, paramiko.SSHException):
            return

    def write(self, data: bytes) -> None:
        """sendall, or ChainLost naming the node and why (its relay ended, the link stalled for STALL seconds)."""
        try:
            if self.channel.exit_status_ready() or self.channel.closed:
                raise OSError("its relay ended")
            self.channel.sendall(data)
        except socket.timeout:
            raise ChainLost(f"{self.head.name} took no bytes for {STALL:.0f} s") from None
        except OSError as exc:
            raise ChainLost(f"{self.head.name} stopped taking the stream ({exc}): {self.why()}") from None

    def close(self) -> None:
        """End the input; wait for the first node's exit status, then its last reports."""
        try:
            self.channel.shutdown_write()
        except (OSError, EOFError):
            pass
        if not self.channel.status_event.wait(STALL):
            self.lost = self.lost or f"{self.head.name}'s relay did not end within {STALL:.0f} s of the stream's end"
        else:
            self.exit_code = self.channel.recv_exit_status()
        for reader in self._readers:
            reader.join(STALL)
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
    """write(bytes) into every chain still taking the stream; a chain that fails is dropped with its reason."""

    def __init__(self, chains: list[Chain]):
        self.chains = chains
        self.sent = 0

    def write(self, data: bytes) -> None:
        live = [c for c in self.chains if not c.lost]
        if not live:
            raise ChainLost("; ".join(c.lost for c in self.chains))
        for chain in live:
            try:
                chain.write(data)
                self.sent += len(data)
            except ChainLost as exc:
                chain.lost = str(exc)
                chain.abort()


def pump(source: Node, source_channel, out: Fanout, chunk: int = relay.CHUNK) -> None:
    """A source node's `relay.py send` output into the chains, as it comes."""
    try:
        while True:
            data = source_channel.recv(chunk)
            if not data:
                break
            out.write(data)
    except socket.timeout:
        raise DapoError(f"{source.name} (the source) sent nothing for {STALL:.0f} s") from None
    code = source_channel.recv_exit_status()
    if code != 0:
        why = source_channel.makefile_stderr("rb").read().decode(errors="replace").strip().splitlines()[-3:]
        raise DapoError(f"{source.name} (the source) could not read its files (exit {code}): {' | '.join(why)}")
