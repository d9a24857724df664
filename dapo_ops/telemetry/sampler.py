"""`npu-smi info` on every node, over one SSH connection per node kept open between samples.

A sample is one command per node, run on all nodes at once over their open connections (a new SSH channel each
time, no new handshake). A node whose connection dropped, or that was unreachable, is connected again at the next
sample; its sample meanwhile says why it has no readings."""

from __future__ import annotations

import threading
import time

from dapo_ops.ascend.npu_smi import parse_npu_smi_info
from dapo_ops.errors import ParseError, SSHError
from dapo_ops.fleet import ssh
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.telemetry.model import NodeSample, readings_from

COMMAND = "npu-smi info"


class Sampler:
    def __init__(self, hosts: list[HostSpec], expected: dict[str, int | None] | None = None,
                 timeout: float = ssh.PROBE):
        self.hosts = hosts
        self.expected = expected or {}
        self.timeout = timeout
        self._connections: dict[str, object] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sample(self, deadline: float | None = None) -> tuple[NodeSample, ...]:
        """Every node's sample, in host order; a node that did not answer by the deadline says so."""
        done = ssh.fan_out(self.hosts, self._sample_one, deadline=deadline).results
        return tuple(done.get(h.name) or NodeSample(h.name, time.time(), error="no answer in time",
                                                    expected=self.expected.get(h.name)) for h in self.hosts)

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            try:
                conn.close()
            except Exception:   # a connection already gone: nothing left to close
                pass

    def _connection(self, host: HostSpec):
        with self._lock:
            conn = self._connections.get(host.name)
        if conn is None:
            conn = ssh.connect(host)
            with self._lock:
                self._connections[host.name] = conn
        return conn

    def _drop(self, host: HostSpec) -> None:
        with self._lock:
            conn = self._connections.pop(host.name, None)
        if conn is not None:
            try:
                conn.close()
            except Exception:   # the connection is what failed: closing it may fail too
                pass

    def _sample_one(self, host: HostSpec) -> NodeSample:
        expected = self.expected.get(host.name)
        try:
            conn = self._connection(host)
        except SSHError as exc:
            return NodeSample(host.name, time.time(), error=f"unreachable: {exc}", expected=expected)
        result = ssh.run(conn, host, COMMAND, self.timeout)
        if result.failure is not None:
            self._drop(host)
            return NodeSample(host.name, time.time(), error=result.error, expected=expected)
        if result.exit_code != 0:
            tail = (result.stderr.strip() or result.stdout.strip())[-200:]
            return NodeSample(host.name, time.time(), error=f"`{COMMAND}` exited {result.exit_code}: {tail}",
                              seconds=result.seconds, expected=expected)
        try:
            info = parse_npu_smi_info(result.stdout, COMMAND)
        except ParseError as exc:
            return NodeSample(host.name, time.time(), error=str(exc), seconds=result.seconds, expected=expected)
        return NodeSample(host.name, time.time(), readings_from(info), seconds=result.seconds, expected=expected)
