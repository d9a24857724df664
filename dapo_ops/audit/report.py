"""Audit output: a rich summary for people (a table per section: versions, NPU health, the Python closure, the
findings), node_exporter textfile metrics for Prometheus."""

from __future__ import annotations

import time

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dapo_ops.ascend.nic import nic_faults
from dapo_ops.audit.model import ERROR, AuditReport, Finding, HostReport
from dapo_ops.manifest import StackManifest

CLOSURE_CODES = ("dist-off-lock", "dist-missing", "dist-extra")
CLOSURE_ROWS = 10   # closure findings listed per host in the findings table; --json lists every one

HEALTH_MARK = {"OK": ("●", "green"), "Warning": ("W", "yellow"), "Alarm": ("A", "red"), "Critical": ("C", "bold red"),
               "UNKNOWN": ("?", "red")}


# text from the nodes (outputs, host names) is shown as written: no rich markup, control characters escaped
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


def _plain(value: str | None, style: str = "") -> Text:
    return Text("" if value is None else str(value).translate(_CONTROL), style=style)


SHORT = {"driver": "drv", "firmware": "fw", "cann_toolkit": "cann", "cann_kernels": "kern",
         "cann_nnal": "nnal", "python": "py", "torch": "torch", "torch_npu": "t_npu", "vllm": "vllm",
         "vllm_ascend": "v_asc", "verl": "verl"}


def print_report(report: AuditReport, manifest: StackManifest, console: Console) -> None:
    """The versions table, the NPU health grid, the closure table, the findings, the notes, then a one-line count."""
    console.print(_versions_table(report, manifest))
    grid = _health_grid(report)
    if grid is not None:
        console.print(grid)
    print_closure(report, console)
    if report.findings:
        console.print(_findings_table(report))
    hosts_of: dict[str, list[str]] = {}
    for note in report.notes:                   # one line per message, naming its hosts (32 nodes, one line)
        hosts_of.setdefault(note.message, []).append(note.host)
    for message, hosts in hosts_of.items():
        where = ", ".join(hosts) if len(hosts) <= 3 else f"{len(hosts)} hosts ({hosts[0]} ... {hosts[-1]})"
        console.print(_plain(f"note: {where}: {message}", style="dim"), highlight=False)
    verdict = ("[red]interrupted: partial audit[/red] " if report.interrupted else "")
    console.print(f"{verdict}{len(report.hosts)} host(s), {len(report.errors)} error(s), "
                  f"{len(report.warnings)} warning(s)", highlight=False)


# ------------------------------------------------------------------------------------------------- versions

def _on_pin(component: str, value: str | None, pinned: str | None) -> bool:
    """The pinned version (for python, the pinned X.Y with any patch level)."""
    return value is not None and (value == pinned or (component == "python" and value.startswith(f"{pinned}.")))


def _version_cell(host: HostReport, component: str, pins: dict, drift: set[tuple[str, str]]) -> Text:
    value = host.components.get(component)
    if not _on_pin(component, value, pins.get(component)):
        return Text(value or "—", style="red")
    if (host.host, component) in drift:
        return Text("✓*", style="yellow")
    return Text("✓", style="green")


def _npus_cell(host: HostReport) -> Text:
    """Healthy NPUs of all those listed or expected."""
    present = sum(n["present"] for n in host.npus)
    ok = sum(n["present"] and n["health"] == "OK" for n in host.npus)
    return Text(f"{ok}/{len(host.npus) or present}", style="green" if ok == len(host.npus) and ok else "red")


def _findings_cell(host: HostReport) -> Text:
    errors = sum(f.severity == ERROR for f in host.findings)
    warnings = len(host.findings) - errors
    summary = Text(f"{errors} error(s)" if errors else "ok", style="red" if errors else "green")
    if warnings:
        summary.append(f", {warnings} warning(s)", style="yellow")
    return summary


def _versions_table(report: AuditReport, manifest: StackManifest) -> Table:
    """One row per host: each component on the pin or not, its healthy NPUs, its findings counted."""
    pins = manifest.pins()
    pins["python"] = manifest.python_version
    table = Table(title=f"fleet audit against {manifest.name}", box=box.SIMPLE_HEAD, padding=(0, 0),
                  caption="✓ pinned · ✓* pinned but unlike the majority · red: off the pin or missing")
    for column in ("host", *SHORT.values(), "NPUs", "findings"):
        table.add_column(column, no_wrap=True)
    drift = {(f.host, f.component) for f in report.findings if f.code == "differs-from-majority"}
    for host in report.hosts:
        if not host.reachable:
            table.add_row(_plain(host.host), *[""] * len(SHORT), "", Text("unreachable", style="bold red"))
            continue
        table.add_row(_plain(host.host), *[_version_cell(host, component, pins, drift) for component in SHORT],
                      _npus_cell(host), _findings_cell(host))
    return table


# ----------------------------------------------------------------------------------------------- NPU health

def _health_cell(npu: dict) -> Text:
    """Missing, then the NIC's link and health, then the chip's own health."""
    if not npu["present"]:
        return Text("✗", style="bold red")
    if "link" in nic_faults(link=npu["link"]):
        return Text("L", style="red")
    if "net_health" in nic_faults(net_health=npu["net_health"]):
        return Text("N", style="red")
    mark, style = HEALTH_MARK.get(npu["health"], ("?", "red"))
    return Text(mark, style=style)


def _health_grid(report: AuditReport) -> Table | None:
    """One row per reachable host, one column per device; None when no host lists any."""
    width = max((len(h.npus) for h in report.hosts), default=0)
    if not width:
        return None
    grid = Table(title="NPU health", box=box.SIMPLE_HEAD, padding=(0, 0),
                 caption="● OK · W warning · A alarm · C critical · ✗ missing · L link down · N NIC unhealthy")
    grid.add_column("host")
    for npu in range(width):
        grid.add_column(str(npu), justify="center")
    for host in report.hosts:
        if host.reachable:
            grid.add_row(_plain(host.host), *[_health_cell(npu) for npu in host.npus])
    return grid


# ---------------------------------------------------------------------------------------------- the closure

def _closure_row(h: HostReport) -> tuple:
    c = h.closure
    if c["lock"] is None:
        return (_plain(h.host), _plain(c["machine"]), Text("none in force", style="dim"), str(c["installed"]),
                "—", "—", "—")
    return (_plain(h.host), _plain(c["machine"]), _plain(c["lock"]), str(c["installed"]),
            Text(str(c["off_lock"]), style="red" if c["off_lock"] else "green"),
            Text(str(c["missing"]), style="red" if c["missing"] else "green"),
            Text(str(c["extra"]), style="yellow" if c["extra"] else "green"))


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
        table.add_row(*_closure_row(h))
    console.print(table)


# ------------------------------------------------------------------------------------------------- findings

def _listed(findings: list[Finding]) -> tuple[list[Finding], dict[str, int]]:
    """Errors first, by host and NPU; at most CLOSURE_ROWS closure findings per host: (listed, host -> closure
    findings not listed)."""
    shown: dict[str, int] = {}
    listed = []
    # errors before warnings; by host; a host's own findings (no NPU) before its NPUs', in NPU order
    for f in sorted(findings, key=lambda f: (f.severity != ERROR, f.host, f.npu if f.npu is not None else -1)):
        if f.code in CLOSURE_CODES:
            shown[f.host] = shown.get(f.host, 0) + 1
            if shown[f.host] > CLOSURE_ROWS:
                continue
        listed.append(f)
    return listed, {host: count - CLOSURE_ROWS for host, count in shown.items() if count > CLOSURE_ROWS}


def _findings_table(report: AuditReport) -> Table:
    table = Table(title="findings")
    for column in ("severity", "host", "npu", "code", "message"):
        table.add_column(column, overflow="fold")
    listed, more = _listed(report.findings)
    for f in listed:
        table.add_row(Text(f.severity, style="red" if f.severity == ERROR else "yellow"), _plain(f.host),
                      "" if f.npu is None else str(f.npu), f.code, _plain(f.message))
    for host, count in more.items():
        table.add_row("", _plain(host), "", "…", f"{count} more lock finding(s) (--json lists all)")
    return table


# ----------------------------------------------------------------------------------------------- Prometheus

def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _gauge(name: str, help_text: str, samples: list[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *samples]


def _host_gauges(report: AuditReport) -> list[str]:
    """Per host: audited or not, its errors and its warnings."""
    return (_gauge("dapo_audit_host_up", "Whether the host could be audited (1) or not (0).",
                   [f'dapo_audit_host_up{{host="{_label(h.host)}"}} {int(h.reachable)}' for h in report.hosts])
            + _gauge("dapo_audit_drift_findings", "Error findings (drift from the pinned stack, faults) per host.",
                     [f'dapo_audit_drift_findings{{host="{_label(h.host)}"}} '
                      f'{sum(f.severity == ERROR for f in h.findings)}' for h in report.hosts])
            + _gauge("dapo_audit_warning_findings", "Warning findings per host.",
                     [f'dapo_audit_warning_findings{{host="{_label(h.host)}"}} '
                      f'{sum(f.severity != ERROR for f in h.findings)}' for h in report.hosts]))


def _closure_gauges(report: AuditReport) -> list[str]:
    """Per host whose distributions were listed: a lock in force or not, and its drift from it by kind."""
    closure = [h for h in report.hosts if h.closure is not None]
    if not closure:
        return []
    return (_gauge("dapo_audit_lock_in_force", "A lock is in force for the host's platform (1) or not (0): "
                   "with 0 its Python closure is not audited.",
                   [f'dapo_audit_lock_in_force{{host="{_label(h.host)}",machine="{_label(h.closure["machine"])}"}} '
                    f'{int(h.closure["lock"] is not None)}' for h in closure])
            + _gauge("dapo_audit_lock_drift", "Installed distributions off the lock, locked ones missing, and extra "
                     "ones, per host.",
                     [f'dapo_audit_lock_drift{{host="{_label(h.host)}",kind="{kind}"}} {h.closure[key]}'
                      for h in closure if h.closure["lock"] is not None
                      for kind, key in (("off-lock", "off_lock"), ("missing", "missing"), ("extra", "extra"))]))


def _npu_gauges(report: AuditReport, pinned_fw: str) -> list[str]:
    """Per device: healthy or not, its temperature and whether it runs the pinned firmware (when known)."""
    health, temp, fw = [], [], []
    for h in report.hosts:
        for n in h.npus:
            labels = f'host="{_label(h.host)}",npu="{n["id"]}"'
            health.append(f'dapo_npu_healthy{{{labels}}} {int(bool(n["present"] and n["health"] == "OK"))}')
            if n["temp_c"] is not None:
                temp.append(f"dapo_npu_temperature_celsius{{{labels}}} {n['temp_c']}")
            if n["firmware"] is not None:
                fw.append(f"dapo_npu_firmware_match{{{labels}}} {int(n['firmware'] == pinned_fw)}")
    return (_gauge("dapo_npu_healthy", "NPU present with health OK (1) or not (0).", health)
            + _gauge("dapo_npu_temperature_celsius", "NPU temperature.", temp)
            + _gauge("dapo_npu_firmware_match", "NPU runs the pinned firmware (1) or not (0).", fw))


def prometheus_text(report: AuditReport, manifest: StackManifest, now: float | None = None) -> str:
    """The node_exporter textfile: host, closure and NPU gauges, and when the audit finished."""
    lines = _host_gauges(report) + _closure_gauges(report) + _npu_gauges(report, manifest.artifact("firmware").version)
    lines += _gauge("dapo_audit_timestamp_seconds", "When this audit finished.",
                    [f"dapo_audit_timestamp_seconds {now if now is not None else time.time():.0f}"])
    return "\n".join(lines) + "\n"
