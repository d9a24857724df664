"""`npu-smi info` on every node, over one SSH connection per node kept open between samples.

A sample is one command per node, run on all nodes at once over their open connections (a new SSH channel each
time, no new handshake). A node whose connection dropped, or that was unreachable, is connected again at the next
sample; its sample meanwhile says why it has no readings. Every `freq_every`-th sample (the first included) also
reads each NPU's AICore frequency, which only `npu-smi info -t common -i N` prints: a second command on the same
connection, one npu-smi call per NPU, each answer after a marker line."""

from __future__ import annotations

import dataclasses
import threading
import time

from dapo_ops.ascend.npu_smi import parse_npu_smi_info
from dapo_ops.ascend.npu_smi_common import parse_npu_smi_common
from dapo_ops.errors import ParseError, SSHError
from dapo_ops.fleet import ssh
from dapo_ops.fleet.ssh import HostSpec
from dapo_ops.telemetry.model import NodeSample, readings_from

COMMAND = "npu-smi info"
MARK = "@@dapo-ops npu "


def frequency_command(npu_ids: list[int]) -> str:
    ids = " ".join(str(int(i)) for i in npu_ids)
    return f'for i in {ids}; do echo "{MARK}$i"; npu-smi info -t common -i "$i" 2>&1; done'


def parse_frequencies(text: str) -> dict[int, tuple[int, int]]:
    """NPU id -> (current, rated) MHz from frequency_command's output; an NPU whose answer does not parse is left
    out (an older npu-smi without the keys)."""
    from dapo_ops.errors import ParseError

    found: dict[int, tuple[int, int]] = {}
    for block in text.split(MARK)[1:]:
        head, _, body = block.partition("\n")
        try:
            info = parse_npu_smi_common(body, f"npu-smi info -t common -i {head.strip()}")
            found[int(head)] = (info.current_mhz, info.rated_mhz)
        except (ParseError, ValueError):
            continue
    return found


class Sampler:
    def __init__(self, hosts: list[HostSpec], expected: dict[str, int | None] | None = None,
                 timeout: float = ssh.PROBE, freq_every: int = 0):
        self.hosts = hosts
        self.expected = expected or {}
        self.timeout = timeout
        self.freq_every = freq_every   # 0: never
        self.samples = 0
        self._connections: dict[str, object] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sample(self, deadline: float | None = None) -> tuple[NodeSample, ...]:
        """Every node's sample, in host order; a node that did not answer by the deadline says so."""
        with_freq = bool(self.freq_every) and self.samples % self.freq_every == 0
        self.samples += 1
        done = ssh.fan_out(self.hosts, lambda host: self._sample_one(host, with_freq), deadline=deadline).results
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

    def _sample_one(self, host: HostSpec, with_freq: bool = False) -> NodeSample:
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
        readings = readings_from(info)
        if with_freq and readings:
            readings = self._with_frequencies(conn, host, readings)
        return NodeSample(host.name, time.time(), readings, seconds=result.seconds, expected=expected)

    def _with_frequencies(self, conn, host: HostSpec, readings: tuple) -> tuple:
        """The readings with each NPU's AICore frequency (chip 0's: `-t common` answers per NPU)."""
        result = ssh.run(conn, host, frequency_command(sorted({r.npu for r in readings})), self.timeout)
        if result.failure is not None or result.exit_code != 0:
            return readings
        found = parse_frequencies(result.stdout)
        return tuple(dataclasses.replace(r, aicore_mhz=found[r.npu][0], rated_mhz=found[r.npu][1])
                     if r.npu in found and r.chip == 0 else r for r in readings)
