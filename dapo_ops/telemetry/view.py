"""What `top` shows: one table of every NPU grouped by node (rich), the run's progress above it and the alerts
below; and the same as one JSON document."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from dapo_ops.telemetry.alerts import ERROR, WARNING, Alert
from dapo_ops.telemetry.model import FleetSample, NpuReading, RunProgress, node_document

_SEVERITY_STYLE = {ERROR: "red", WARNING: "yellow"}


def document(sample: FleetSample) -> dict:
    """One JSON document: per node, per NPU, the run's progress and the alerts."""
    run = sample.run
    return {"at": round(sample.at, 3), "nodes": [node_document(n) for n in sample.nodes],
            "npus": sum(len(n.npus) for n in sample.nodes),
            "run": None if run is None else {k: v for k, v in vars(run).items()},
            "alerts": [a.document() for a in sample.alerts]}


def _cell(value, suffix: str = "", style: str = "") -> Text:
    return Text("-" if value is None else f"{value}{suffix}", style=style)


def _marks(sample: FleetSample) -> dict[tuple[str, int], str]:
    worst: dict[tuple[str, int], str] = {}
    for alert in sample.alerts:
        if alert.npu is not None and worst.get((alert.node, alert.npu)) != ERROR:
            worst[(alert.node, alert.npu)] = alert.severity
    return worst


def _row(node: str, r: NpuReading, severity: str | None) -> tuple:
    style = _SEVERITY_STYLE.get(severity or "", "")
    hbm = f"{r.hbm_used_mb}/{r.hbm_total_mb}" + (f" ({r.hbm_fraction:.0%})" if r.hbm_fraction is not None else "")
    return (Text(node), Text(str(r.device), style=style), _cell(r.aicore_pct, " %"), _cell(r.aicore_mhz), Text(hbm),
            _cell(r.temp_c, " C", style), _cell(r.power_w, " W"),
            Text(r.health, style="" if r.health == "OK" else "red"))


def npu_table(sample: FleetSample) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, justify in (("node", "left"), ("NPU", "right"), ("AICore", "right"), ("MHz", "right"),
                          ("HBM MB", "right"), ("temp", "right"), ("power", "right"), ("health", "left")):
        table.add_column(name, justify=justify, no_wrap=True)
    marks = _marks(sample)
    for node in sample.nodes:
        if not node.ok:
            # the reason is in the node's alert under the table: a long cell here would squeeze the columns out
            table.add_row(Text(node.node), Text("-"), Text("no sample", style="red"), end_section=True)
            continue
        for k, r in enumerate(node.npus):
            table.add_row(*_row(node.node if k == 0 else "", r, marks.get((node.node, r.device))),
                          end_section=k == len(node.npus) - 1)
    return table


def run_line(run: RunProgress | None) -> Text | None:
    if run is None:
        return None
    parts = [f"run {run.run_id} ({run.state})"]
    if run.step is not None:
        parts.append(f"step {run.step}")
    if run.step_seconds is not None:
        parts.append(f"{run.step_seconds:.1f} s/step")
    if run.tokens_per_second is not None:
        parts.append(f"{run.tokens_per_second:,.0f} tokens/s")
    if run.note:
        parts.append(run.note)
    return Text(" · ".join(parts), style="bold")


def alert_lines(alerts: tuple[Alert, ...] | list[Alert]) -> list[Text]:
    return [Text.assemble((f"{a.severity}: ", _SEVERITY_STYLE.get(a.severity, "cyan")), a.message,
                          (f" — check {a.check}", "dim")) for a in alerts]


def screen(sample: FleetSample, title: str) -> Group:
    parts = [Text(title, style="dim")]
    line = run_line(sample.run)
    if line is not None:
        parts.append(line)
    parts.append(npu_table(sample))
    parts += alert_lines(sample.alerts) or [Text("no alerts", style="green")]
    return Group(*parts)
