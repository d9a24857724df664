"""`npu-smi info` on every node, over one SSH connection per node kept open between samples.

A sample is one command per node, run on all nodes at once over their open connections (a new SSH channel each
time, no new handshake). A node whose connection dropped, or that was unreachable, is connected again at the next
sample; its sample meanwhile says why it has no readings. Every `freq_every`-th sample (the first included) also
reads each NPU's AICore frequency, which only `npu-smi info -t common -i N` prints: a second command on the same
connection, one npu-smi call per NPU, each answer after a marker line; the samples between carry the last read."""

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
    return f'for i in {ids}; do echo "{MARK}$i"; npu-smi info -t common -i "$i" 2>&1; done; exit 0'


def parse_frequencies(text: str) -> dict[int, tuple[int, int, int | None]]:
    """NPU id -> (current MHz, rated MHz, the AICore % printed with them) from frequency_command's output; an NPU
    whose answer does not parse is left out (an older npu-smi without the keys, an NPU gone)."""
    found: dict[int, tuple[int, int, int | None]] = {}
    for block in text.split(MARK)[1:]:
        head, _, body = block.partition("\n")
        try:
            info = parse_npu_smi_common(body, f"npu-smi info -t common -i {head.strip()}")
            found[int(head)] = (info.current_mhz, info.rated_mhz, info.aicore_pct)
        except (ParseError, ValueError):
            continue
    return found


class Sampler:
    """One node's `npu-smi info` per sample, every node at once, over connections kept open until close()."""

    def __init__(self, hosts: list[HostSpec], expected: dict[str, int | None] | None = None,
                 timeout: float = ssh.PROBE, freq_every: int = 0):
        self.hosts = hosts
        self.expected = expected or {}
        self.timeout = timeout
        self.freq_every = freq_every   # 0: never
        self.samples = 0
        self._in_flight: set[str] = set()
        self._frequencies: dict[str, dict[int, tuple[int, int, int | None]]] = {}
        self._closed = False
        self._connections: dict[str, object] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sample(self, deadline: float | None = None) -> tuple[NodeSample, ...]:
        """Every node's sample, in host order; a node that did not answer by the deadline says so. A node still
        answering an earlier sample (past its deadline) is not asked again until it has answered."""
        with_freq = bool(self.freq_every) and self.samples % self.freq_every == 0
        self.samples += 1
        with self._lock:
            busy = set(self._in_flight)
            ready = [h for h in self.hosts if h.name not in busy]
            self._in_flight.update(h.name for h in ready)
        done = ssh.fan_out(ready, lambda host: self._sampled(host, with_freq), deadline=deadline).results
        return tuple(done.get(h.name) or NodeSample(
            h.name, time.time(), expected=self.expected.get(h.name),
            error="still answering an earlier sample" if h.name in busy else "no answer in time") for h in self.hosts)

    def close(self) -> None:
        """Closes every connection; one still being made is closed when it is made."""
        with self._lock:
            self._closed = True
            connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            _close(conn)

    def _sampled(self, host: HostSpec, with_freq: bool) -> NodeSample:
        try:
            return self._sample_one(host, with_freq)
        finally:
            with self._lock:
                self._in_flight.discard(host.name)

    def _connection(self, host: HostSpec):
        with self._lock:
            conn = self._connections.get(host.name)
        if conn is None:
            conn = ssh.connect(host)
            with self._lock:
                closed = self._closed
                if not closed:
                    self._connections[host.name] = conn
            if closed:
                _close(conn)
                raise SSHError(f"{host.name}: the sampler was closed")
        return conn

    def _drop(self, host: HostSpec, conn) -> None:
        with self._lock:
            if self._connections.get(host.name) is conn:
                del self._connections[host.name]
        _close(conn)

    def _sample_one(self, host: HostSpec, with_freq: bool = False) -> NodeSample:
        expected = self.expected.get(host.name)
        try:
            conn = self._connection(host)
        except SSHError as exc:
            return NodeSample(host.name, time.time(), error=f"unreachable: {exc}", expected=expected)
        result = ssh.run(conn, host, COMMAND, self.timeout)
        if result.failure is not None:
            self._drop(host, conn)
            return NodeSample(host.name, time.time(), error=result.error, expected=expected)
        if result.exit_code != 0:
            tail = (result.stderr.strip() or result.stdout.strip())[-200:]
            return NodeSample(host.name, time.time(), error=f"`{COMMAND}` exited {result.exit_code}: {tail}",
                              seconds=result.seconds, expected=expected)
        try:
            info = parse_npu_smi_info(result.stdout, COMMAND)
        except ParseError as exc:
            return NodeSample(host.name, time.time(), error=str(exc), seconds=result.seconds, expected=expected)
        at, readings = time.time(), readings_from(info)
        if with_freq and readings:
            self._read_frequencies(conn, host, sorted({r.npu for r in readings}))
        return NodeSample(host.name, at, self._with_frequencies(host, readings), seconds=result.seconds,
                          expected=expected)

    def _read_frequencies(self, conn, host: HostSpec, npu_ids: list[int]) -> None:
        result = ssh.run(conn, host, frequency_command(npu_ids), self.timeout)
        if result.failure is None and result.exit_code == 0:
            with self._lock:
                self._frequencies[host.name] = parse_frequencies(result.stdout)

    def _with_frequencies(self, host: HostSpec, readings: tuple) -> tuple:
        """The readings with each NPU's AICore frequency as last read (chip 0's: `-t common` answers per NPU), as
        npu-exporter shows the value of its last collection between collections."""
        with self._lock:
            found = self._frequencies.get(host.name, {})
        return tuple(dataclasses.replace(r, aicore_mhz=found[r.npu][0], rated_mhz=found[r.npu][1],
                                         freq_busy_pct=found[r.npu][2])
                     if r.npu in found and r.chip == 0 else r for r in readings)


def _close(conn) -> None:
    try:
        conn.close()
    except Exception:   # a connection already gone, or the one that failed: nothing left to close
        pass
