"""A fleet sample as MindCluster npu-exporter's Prometheus metrics, so dashboards built on it work unchanged.

Names, HELP texts and labels are npu-exporter's (Ascend/mind-cluster, component/npu-exporter/collector/metrics/
collector_for_npu.go, collector_for_utilization.go and collector_for_hbm.go; the label set in
collector/common/constants.go `CardLabel`: id, model_name, vdie_id, pcie_bus_info, namespace, pod_name,
container_name). `id` is the physical chip id (the Phy-ID, the NPU id on a 910B), and `machine_npu_nums` counts
chips, as the exporter does (two per A3 NPU). What differs, and why:
- one exposition covers many nodes, so every sample also carries `host` (Prometheus's `instance` is the scrape
  target's and cannot be set here);
- `vdie_id` is empty and `namespace`/`pod_name`/`container_name` are empty, as the exporter writes them when it
  cannot read them or no container holds the NPU: `npu-smi info` does not print the vdie id;
- `model_name` is `<Chip Name>-Ascend-V1`, the exporter's `<ChipName>-<ChipType>-<ChipVersion>` with the chip type
  and version a 910B reports (`npu-smi info -t board -i N -c 0`);
- no timestamps: node_exporter's textfile collector refuses samples that carry one.
"""

from __future__ import annotations

from pathlib import Path

from dapo_ops.files import write_atomically
from dapo_ops.telemetry.model import FleetSample, NpuReading

_CHIP = (  # name, HELP (npu-exporter's, verbatim), value
    ("npu_chip_info_utilization", "the ai core utilization", lambda r: r.aicore_pct),
    ("npu_chip_info_temperature", "the npu temperature", lambda r: r.temp_c),
    ("npu_chip_info_power", "the npu power", lambda r: r.power_w),
    ("npu_chip_info_health_status", "the npu health status", lambda r: 1 if r.health == "OK" else 0),
    ("npu_chip_info_hbm_used_memory", "the npu hbm used memory", lambda r: r.hbm_used_mb),
    ("npu_chip_info_hbm_total_memory", "the npu hbm total memory", lambda r: r.hbm_total_mb),
    ("npu_chip_info_hbm_utilization", "the npu hbm utilization",
     lambda r: None if r.hbm_fraction is None else round(100 * r.hbm_fraction)),
    ("npu_chip_info_aicore_current_freq", "the npu ai core current frequency, unit is 'MHz'", lambda r: r.aicore_mhz),
)


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(host: str, r: NpuReading, name_label: str = "model_name") -> str:
    pairs = (("container_name", ""), ("host", host), ("id", str(r.device)),
             (name_label, f"{r.name}-Ascend-V1" if r.name else ""), ("namespace", ""),
             ("pcie_bus_info", r.bus_id), ("pod_name", ""), ("vdie_id", ""))
    return ",".join(f'{k}="{_quoted(v)}"' for k, v in sorted(pairs))


def _number(value) -> str:
    return str(int(value)) if isinstance(value, bool) else repr(value) if isinstance(value, float) else str(value)


def _family(name: str, help_text: str, samples: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *samples] if samples else []


def exposition(sample: FleetSample) -> str:
    """The Prometheus text format: npu-exporter's families, then `dapo_top_node_up` per node."""
    readings = sample.readings
    lines = _family("machine_npu_nums", "Amount of npu installed on the machine.",
                    [f'machine_npu_nums{{host="{_quoted(n.node)}"}} {len(n.npus)}' for n in sample.nodes if n.ok])
    lines += _family("npu_chip_info_name", "the Ascend npu name with value '1'",
                     [f"npu_chip_info_name{{{_labels(node, r, 'name')}}} 1" for node, r in readings])
    for name, help_text, value in _CHIP:
        lines += _family(name, help_text, [f"{name}{{{_labels(node, r)}}} {_number(value(r))}"
                                           for node, r in readings if value(r) is not None])
    lines += _family("dapo_top_node_up", "Whether npu-smi answered on the node in this sample (1) or not (0).",
                     [f'dapo_top_node_up{{host="{_quoted(n.node)}"}} {int(n.ok)}' for n in sample.nodes])
    return "\n".join(lines) + "\n"


def write_textfile(path: Path, sample: FleetSample) -> None:
    """Written whole (a temporary file renamed), so the collector never reads half a file."""
    write_atomically(path, exposition(sample))
