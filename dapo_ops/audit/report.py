"""Audit output: a rich summary for people, node_exporter textfile metrics for Prometheus."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dapo_ops.ascend.nic import nic_faults
from dapo_ops.audit.analyze import ERROR, AuditReport

CLOSURE_CODES = ("dist-off-lock", "dist-missing", "dist-extra")
CLOSURE_ROWS = 10   # closure findings listed per host in the findings table; --json lists every one
from dapo_ops.manifest import StackManifest
from dapo_ops.stackcheck import pinned_python_packages

HEALTH_MARK = {"OK": ("●", "green"), "Warning": ("W", "yellow"), "Alarm": ("A", "red"), "Critical": ("C", "bold red"),
               "UNKNOWN": ("?", "red")}


def _pins(manifest: StackManifest) -> dict[str, str]:
    return {"driver": manifest.artifact("driver").version, "firmware": manifest.artifact("firmware").version,
            "cann_toolkit": manifest.artifact("cann_toolkit").version,
            "cann_kernels": manifest.artifact("cann_kernels").version,
            "cann_nnal": manifest.artifact("cann_nnal").version, **pinned_python_packages(manifest)}


SHORT = {"driver": "drv", "firmware": "fw", "cann_toolkit": "cann", "cann_kernels": "kern",
         "cann_nnal": "nnal", "python": "py", "torch": "torch", "torch_npu": "t_npu", "vllm": "vllm",
         "vllm_ascend": "v_asc", "verl": "verl"}


def print_report(report: AuditReport, manifest: StackManifest, console: Console) -> None:
    pins = _pins(manifest)
    pins["python"] = manifest.python_version
    table = Table(title=f"fleet audit against {manifest.name}", box=box.SIMPLE_HEAD, padding=(0, 0),
                  caption="✓ pinned · ✓* pinned but unlike the majority · red: off the pin or missing")
    table.add_column("host", no_wrap=True)
    for component in SHORT.values():
        table.add_column(component, no_wrap=True)
    table.add_column("NPUs", no_wrap=True)
    table.add_column("findings", no_wrap=True)
    drift = {(f.host, f.component) for f in report.findings if f.code == "differs-from-majority"}
    for host in report.hosts:
        if not host.reachable:
            table.add_row(host.host, *[""] * len(SHORT), "", Text("unreachable", style="bold red"))
            continue
        cells = []
        for component in SHORT:
            value = host.components.get(component)
            pinned = pins.get(component)
            on_pin = value is not None and (value == pinned or (component == "python" and value.startswith(f"{pinned}.")))
            if not on_pin:
                cells.append(Text(value or "—", style="red"))
            elif (host.host, component) in drift:
                cells.append(Text("✓*", style="yellow"))
            else:
                cells.append(Text("✓", style="green"))
        present = sum(n["present"] for n in host.npus)
        ok = sum(n["present"] and n["health"] == "OK" for n in host.npus)
        errors = sum(f.severity == ERROR for f in host.findings)
        warnings = len(host.findings) - errors
        npus = Text(f"{ok}/{len(host.npus) or present}", style="green" if ok == len(host.npus) and ok else "red")
        summary = Text(f"{errors} error(s)" if errors else "ok", style="red" if errors else "green")
        if warnings:
            summary.append(f", {warnings} warning(s)", style="yellow")
        table.add_row(host.host, *cells, npus, summary)
    console.print(table)

    grid = Table(title="NPU health", box=box.SIMPLE_HEAD, padding=(0, 0),
                 caption="● OK · W warning · A alarm · C critical · ✗ missing · L link down · N NIC unhealthy")
    grid.add_column("host")
    width = max((len(h.npus) for h in report.hosts), default=0)
    for npu in range(width):
        grid.add_column(str(npu), justify="center")
    for host in report.hosts:
        if not host.reachable:
            continue
        cells = []
        for npu in host.npus:
            if not npu["present"]:
                cells.append(Text("✗", style="bold red"))
            elif "link" in nic_faults(link=npu["link"]):
                cells.append(Text("L", style="red"))
            elif "net_health" in nic_faults(net_health=npu["net_health"]):
                cells.append(Text("N", style="red"))
            else:
                mark, style = HEALTH_MARK.get(npu["health"], ("?", "red"))
                cells.append(Text(mark, style=style))
        grid.add_row(host.host, *cells)
    if width:
        console.print(grid)

    print_closure(report, console)

    if report.findings:
        findings = Table(title="findings")
        for column in ("severity", "host", "npu", "code", "message"):
            findings.add_column(column, overflow="fold")
        shown: dict[str, int] = {}
        for f in sorted(report.findings, key=lambda f: (f.severity != ERROR, f.host, f.npu if f.npu is not None else -1)):
            if f.code in CLOSURE_CODES:
                shown[f.host] = shown.get(f.host, 0) + 1
                if shown[f.host] > CLOSURE_ROWS:
                    continue
            findings.add_row(Text(f.severity, style="red" if f.severity == ERROR else "yellow"), f.host,
                             "" if f.npu is None else str(f.npu), f.code, f.message)
        for host, count in shown.items():
            if count > CLOSURE_ROWS:
                findings.add_row("", host, "", "…", f"{count - CLOSURE_ROWS} more lock finding(s) (--json lists all)")
        console.print(findings)
    for note in report.notes:
        console.print(f"[dim]note: {note.host}: {note.message}[/dim]", highlight=False)
    verdict = ("[red]interrupted: partial audit[/red] " if report.interrupted else "")
    console.print(f"{verdict}{len(report.hosts)} host(s), {len(report.errors)} error(s), "
                  f"{len(report.warnings)} warning(s)", highlight=False)


def print_closure(report: AuditReport, console: Console) -> None:
    """One row per host: the env's distributions against the lock of its platform, counted, not listed."""
    hosts = [h for h in report.hosts if h.closure is not None]
    if not hosts:
        return
    table = Table(title="Python closure against the lock", box=box.SIMPLE_HEAD, padding=(0, 1),
                  caption="off-lock / missing: errors · extra: warnings (details in findings, all of them in --json)")
    for column in ("host", "machine", "lock", "installed", "off-lock", "missing", "extra"):
        table.add_column(column, no_wrap=True, justify="left" if column in ("host", "machine", "lock") else "right")
    for h in hosts:
        c = h.closure
        if c["lock"] is None:
            table.add_row(h.host, c["machine"], Text("none in force", style="dim"), str(c["installed"]),
                          "—", "—", "—")
            continue
        table.add_row(h.host, c["machine"], c["lock"], str(c["installed"]),
                      Text(str(c["off_lock"]), style="red" if c["off_lock"] else "green"),
                      Text(str(c["missing"]), style="red" if c["missing"] else "green"),
                      Text(str(c["extra"]), style="yellow" if c["extra"] else "green"))
    console.print(table)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(report: AuditReport, manifest: StackManifest, now: float | None = None) -> str:
    pinned_fw = manifest.artifact("firmware").version
    lines = [
        "# HELP dapo_audit_host_up Whether the host could be audited (1) or not (0).",
        "# TYPE dapo_audit_host_up gauge",
    ]
    lines += [f'dapo_audit_host_up{{host="{_label(h.host)}"}} {int(h.reachable)}' for h in report.hosts]
    lines += ["# HELP dapo_audit_drift_findings Error findings (drift from the pinned stack, faults) per host.",
              "# TYPE dapo_audit_drift_findings gauge"]
    lines += [f'dapo_audit_drift_findings{{host="{_label(h.host)}"}} '
              f'{sum(f.severity == ERROR for f in h.findings)}' for h in report.hosts]
    lines += ["# HELP dapo_audit_warning_findings Warning findings per host.",
              "# TYPE dapo_audit_warning_findings gauge"]
    lines += [f'dapo_audit_warning_findings{{host="{_label(h.host)}"}} '
              f'{sum(f.severity != ERROR for f in h.findings)}' for h in report.hosts]
    closure = [h for h in report.hosts if h.closure is not None]
    if closure:
        lines += ["# HELP dapo_audit_lock_in_force A lock is in force for the host's platform (1) or not (0): "
                  "with 0 its Python closure is not audited.", "# TYPE dapo_audit_lock_in_force gauge"]
        lines += [f'dapo_audit_lock_in_force{{host="{_label(h.host)}",machine="{_label(h.closure["machine"])}"}} '
                  f'{int(h.closure["lock"] is not None)}' for h in closure]
        lines += ["# HELP dapo_audit_lock_drift Installed distributions off the lock, locked ones missing, and extra "
                  "ones, per host.", "# TYPE dapo_audit_lock_drift gauge"]
        lines += [f'dapo_audit_lock_drift{{host="{_label(h.host)}",kind="{kind}"}} {h.closure[key]}'
                  for h in closure if h.closure["lock"] is not None
                  for kind, key in (("off-lock", "off_lock"), ("missing", "missing"), ("extra", "extra"))]
    npu_lines = {"health": [], "temp": [], "fw": []}
    for h in report.hosts:
        for n in h.npus:
            labels = f'host="{_label(h.host)}",npu="{n["id"]}"'
            npu_lines["health"].append(f'dapo_npu_healthy{{{labels}}} {int(bool(n["present"] and n["health"] == "OK"))}')
            if n["temp_c"] is not None:
                npu_lines["temp"].append(f"dapo_npu_temperature_celsius{{{labels}}} {n['temp_c']}")
            if n["firmware"] is not None:
                npu_lines["fw"].append(f"dapo_npu_firmware_match{{{labels}}} {int(n['firmware'] == pinned_fw)}")
    lines += ["# HELP dapo_npu_healthy NPU present with health OK (1) or not (0).", "# TYPE dapo_npu_healthy gauge",
              *npu_lines["health"],
              "# HELP dapo_npu_temperature_celsius NPU temperature.", "# TYPE dapo_npu_temperature_celsius gauge",
              *npu_lines["temp"],
              "# HELP dapo_npu_firmware_match NPU runs the pinned firmware (1) or not (0).",
              "# TYPE dapo_npu_firmware_match gauge", *npu_lines["fw"],
              "# HELP dapo_audit_timestamp_seconds When this audit finished.",
              "# TYPE dapo_audit_timestamp_seconds gauge",
              f"dapo_audit_timestamp_seconds {now if now is not None else time.time():.0f}"]
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write then rename, so a textfile collector never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
