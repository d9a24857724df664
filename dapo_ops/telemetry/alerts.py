"""Alerts on a fleet's NPU samples, each naming the node and NPU and what to check: the seed's causes of a slow or
failing run (its troubleshooting table: throughput collapsing under thermal throttling, NPUs at 65 % until the
micro batch grew, communication waiting on a NIC).

Pure: `alerts(window)` reads the newest sample for the state of each NPU (present, health, temperature, HBM) and
the whole window for utilisation, which swings within a step (rollout, log-probs, the update)."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean, median

from dapo_ops.telemetry.model import FleetSample, NodeSample, NpuReading

ERROR, WARNING, INFO = "error", "warning", "info"


@dataclass(frozen=True)
class Thresholds:
    throttle_c: int = 105           # MindCluster's fault diagnosis: "too high, and frequency reduction occurs"
    near_throttle_c: int = 10       # warn this many degrees below it
    hbm_full: float = 0.95          # HBM used / total
    busy_pct: int = 30              # the fleet is in a step when the median node averages at least this AICore %
    lagging: float = 0.5            # a node lags below this fraction of the other nodes' median AICore %
    low_pct: int = 70               # in a step, a fleet median AICore % below this suggests a bigger micro batch
    reduced: float = 0.95           # a busy NPU's AICore below this share of its rated frequency is reduced
    freq_busy_pct: int = 10         # busy: at least this AICore % in the table and where the frequency was read


@dataclass(frozen=True)
class Alert:
    severity: str
    code: str
    node: str
    npu: int | None                 # the device (/dev/davinciN) index; None for the node as a whole
    message: str
    check: str                      # what to look at

    def document(self) -> dict:
        return {"severity": self.severity, "code": self.code, "node": self.node, "npu": self.npu,
                "message": self.message, "check": self.check}

    @property
    def where(self) -> str:
        return self.node + (f" NPU {self.npu}" if self.npu is not None else "")


def alerts(window: list[FleetSample], thresholds: Thresholds = Thresholds()) -> list[Alert]:
    """Every alert on the newest sample, with utilisation judged over the whole window (oldest first)."""
    if not window:
        return []
    latest = window[-1]
    found: list[Alert] = []
    for node in latest.nodes:
        found += _node_state(node, thresholds)
    found += _utilisation(window, thresholds)
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    return sorted(found, key=lambda a: (order[a.severity], a.node, -1 if a.npu is None else a.npu, a.code))


def _node_state(node: NodeSample, t: Thresholds) -> list[Alert]:
    if not node.ok:
        return [Alert(ERROR, "no-sample", node.node, None, f"{node.node}: no npu-smi sample ({node.error})",
                      "the node's SSH and `npu-smi info` on it (driver loaded?)")]
    found = _missing(node)
    for r in node.npus:
        found += _reading(node.node, r, t)
    return found


def _missing(node: NodeSample) -> list[Alert]:
    if node.expected is None:
        return []
    present = {r.device for r in node.npus}
    missing = [d for d in range(node.expected) if d not in present]
    return [Alert(ERROR, "npu-missing", node.node, d,
                  f"{node.node} NPU {d} is missing: npu-smi lists {len(present)} of the inventory's {node.expected}",
                  "`npu-smi info -l`, `lspci | grep d80` and dmesg on the node; the NPU's board and power")
            for d in missing]


def _reading(node: str, r: NpuReading, t: Thresholds) -> list[Alert]:
    found = []
    where = f"{node} NPU {r.device}"
    if r.health != "OK":
        severity = WARNING if r.health == "Warning" else ERROR
        found.append(Alert(severity, "npu-unhealthy", node, r.device, f"{where} health is {r.health}",
                           f"`npu-smi info -t health -i {r.npu}` for its error code, then the fault code list"))
    if r.temp_c is not None and r.temp_c >= t.throttle_c:
        found.append(Alert(ERROR, "npu-throttling", node, r.device,
                           f"{where} is at {r.temp_c} C, at or above {t.throttle_c} C, where Ascend's fault "
                           f"diagnosis finds the AICore frequency reduced: its steps slow down",
                           "cooling: fans, inlet air temperature, blocked airflow (the seed's throughput collapse)"))
    elif r.temp_c is not None and r.temp_c >= t.throttle_c - t.near_throttle_c:
        found.append(Alert(WARNING, "npu-hot", node, r.device,
                           f"{where} is at {r.temp_c} C, within {t.near_throttle_c} C of throttling at "
                           f"{t.throttle_c} C",
                           "cooling: fans, inlet air temperature, blocked airflow"))
    if (r.aicore_mhz is not None and r.rated_mhz and r.aicore_mhz < t.reduced * r.rated_mhz
            and min(r.aicore_pct or 0, r.freq_busy_pct or 0) >= t.freq_busy_pct):
        found.append(Alert(WARNING, "npu-freq-reduced", node, r.device,
                           f"{where} AICore runs at {r.aicore_mhz} of its {r.rated_mhz} MHz at {r.aicore_pct} % "
                           f"AICore: its steps slow down",
                           "its temperature and cooling, the board's power and power capping on the iBMC (npu-smi "
                           "does not print the cause)"))
    fraction = r.hbm_fraction
    if fraction is not None and fraction >= t.hbm_full:
        found.append(Alert(WARNING, "hbm-full", node, r.device,
                           f"{where} HBM is {fraction:.0%} full ({r.hbm_used_mb} of {r.hbm_total_mb} MB)",
                           "an out-of-memory is near: lower rollout.gpu_memory_utilization or the micro batch, or "
                           "keep param and optimizer offload on"))
    return found


def _node_means(window: list[FleetSample]) -> dict[str, float]:
    """Per node, its NPUs' mean AICore % over the window (nodes with no AICore reading are left out)."""
    values: dict[str, list[int]] = {}
    for sample in window:
        for node in sample.nodes:
            values.setdefault(node.node, []).extend(r.aicore_pct for r in node.npus if r.aicore_pct is not None)
    return {node: mean(v) for node, v in values.items() if v}


def _utilisation(window: list[FleetSample], t: Thresholds) -> list[Alert]:
    means = _node_means(window)
    if not means or median(means.values()) < t.busy_pct:
        return []   # no step runs: idle NPUs are not slow ones
    found = []
    for node, value in means.items():
        others = [v for n, v in means.items() if n != node]
        if others and value < t.lagging * median(others):
            found.append(Alert(WARNING, "node-lagging", node, None,
                               f"{node}'s NPUs average {value:.0f} % AICore while the other nodes average "
                               f"{median(others):.0f} %: the step waits for it",
                               "its NICs (`hccn_tool -i N -link -g`, `-net_health -g`; HCCL waits on the slowest "
                               "link), its NPUs' temperature and its host (CPU, memory)"))
    overall = median(means.values())
    if overall < t.low_pct:
        found.append(Alert(INFO, "low-utilisation", "fleet", None,
                           f"the NPUs average {overall:.0f} % AICore during steps",
                           "a bigger micro batch (the seed went from 65 % to 89 % by doubling it) where HBM allows: "
                           "ppo_micro_batch_size_per_gpu, log_prob_micro_batch_size_per_gpu"))
    return found
