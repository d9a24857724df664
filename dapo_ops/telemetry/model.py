"""One sample of a fleet's NPUs: per node, per chip, what `npu-smi info` printed at one moment."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from dapo_ops.ascend.npu_smi import NpuSmiInfo


@dataclass(frozen=True)
class NpuReading:
    """One chip (a 910B NPU has one; an A3 NPU two): `device` is the /dev/davinciN index (dapo_ops.ascend.npu_smi)."""

    npu: int
    chip: int
    device: int
    name: str
    health: str
    aicore_pct: int | None
    hbm_used_mb: int
    hbm_total_mb: int
    temp_c: int | None
    power_w: float | None
    bus_id: str = ""
    aicore_mhz: int | None = None       # the AICore's current frequency (npu-smi info -t common), when read
    rated_mhz: int | None = None        # its rated frequency
    freq_busy_pct: int | None = None    # the AICore % npu-smi printed with the frequency

    @property
    def hbm_fraction(self) -> float | None:
        return self.hbm_used_mb / self.hbm_total_mb if self.hbm_total_mb else None


@dataclass(frozen=True)
class NodeSample:
    """A node at one moment: its chips, or why there are none (unreachable, npu-smi failed or printed no table)."""

    node: str
    at: float                           # epoch seconds when the answer came
    npus: tuple[NpuReading, ...] = ()
    error: str | None = None
    seconds: float | None = None        # how long the npu-smi call took over the kept-open connection
    expected: int | None = None         # the inventory's NPUs per node, when it declares them

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class RunProgress:
    """Where the run's log is: its latest step, that step's time and the throughput, as `report` reads them."""

    run_id: str
    state: str
    step: int | None = None
    step_seconds: float | None = None
    tokens_per_second: float | None = None
    note: str | None = None             # why there is no step (not started, the log could not be read)


@dataclass(frozen=True)
class FleetSample:
    at: float
    nodes: tuple[NodeSample, ...]
    run: RunProgress | None = None
    alerts: tuple = field(default=())   # dapo_ops.telemetry.alerts.Alert

    @property
    def readings(self) -> list[tuple[str, NpuReading]]:
        return [(n.node, r) for n in self.nodes for r in n.npus]


def readings_from(info: NpuSmiInfo) -> tuple[NpuReading, ...]:
    return tuple(NpuReading(npu=c.npu_id, chip=c.chip_id, device=c.device_id, name=c.name, health=c.health,
                            aicore_pct=c.aicore_pct, hbm_used_mb=c.hbm_used_mb, hbm_total_mb=c.hbm_total_mb,
                            temp_c=c.temp_c, power_w=c.power_w, bus_id=c.bus_id)
                 for c in sorted(info.chips, key=lambda c: (c.npu_id, c.chip_id)))


def node_document(sample: NodeSample) -> dict:
    document = {"node": sample.node, "at": round(sample.at, 3), "ok": sample.ok, "expected_npus": sample.expected,
                "npus": [asdict(r) for r in sample.npus]}
    if sample.error is not None:
        document["error"] = sample.error
    if sample.seconds is not None:
        document["npu_smi_seconds"] = round(sample.seconds, 4)
    return document
