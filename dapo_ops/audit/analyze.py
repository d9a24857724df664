"""From collected facts to findings: against the pinned stack and against the fleet's majority (pure)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from dapo_ops.ascend.compat import check_compatibility
from dapo_ops.audit.collect import HostRaw
from dapo_ops.audit.fact import Fact, all_facts
from dapo_ops.errors import ParseError
from dapo_ops.manifest import StackManifest
from dapo_ops.stackcheck import pinned_python_packages, python_stack_problems

ERROR, WARNING = "error", "warning"
REPORT_SCHEMA = "dapo-ops/audit/v1"
COMPONENTS = ("driver", "firmware", "cann_toolkit", "cann_kernels", "cann_nnal", "python", "numpy", "torch",
              "torch_npu", "vllm", "vllm_ascend", "verl")


@dataclass(frozen=True)
class Thresholds:
    temp_c: int = 85            # warn above this NPU temperature
    hbm_used_mb: int = 8192     # warn when more HBM than this is already in use (idle is ~3.3 GB)


@dataclass(frozen=True)
class Finding:
    host: str
    npu: int | None
    severity: str
    code: str
    component: str
    message: str
    expected: str | None = None
    actual: str | None = None


@dataclass
class HostReport:
    host: str
    reachable: bool
    error: str | None
    components: dict[str, str | None] = field(default_factory=dict)
    npus: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class AuditReport:
    manifest: str
    hosts: list[HostReport]
    interrupted: bool = False

    @property
    def findings(self) -> list[Finding]:
        return [f for h in self.hosts for f in h.findings]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    def to_dict(self) -> dict:
        return {
            "schema": REPORT_SCHEMA,
            "manifest": self.manifest,
            "interrupted": self.interrupted,
            "summary": {"hosts": len(self.hosts), "reachable": sum(h.reachable for h in self.hosts),
                        "errors": len(self.errors), "warnings": len(self.warnings), "clean": not self.errors},
            "hosts": {h.host: {"reachable": h.reachable, "error": h.error, "components": h.components,
                               "npus": h.npus, "findings": [asdict(f) for f in h.findings]} for h in self.hosts},
            "findings": [asdict(f) for f in self.findings],
        }


def _values(raw: HostRaw, facts: dict[str, Fact]) -> tuple[dict[str, Any], list[Finding]]:
    """Parse every collected output; a failed or unparsable one becomes a finding naming where it came from."""
    values: dict[str, Any] = {}
    findings = []
    for key, (rc, text) in sorted(raw.outputs.items()):
        name = key.split(".")[0]
        fact = facts.get(name)
        if fact is None:
            continue
        where = f"{raw.host}/{key}.txt" if raw.source != "ssh" else f"{key} on {raw.host}"
        try:
            values[key] = fact.value(rc, text, where)
        except ParseError as exc:
            npu = int(key.split(".")[1]) if "." in key else None
            findings.append(Finding(raw.host, npu, ERROR, "collect-failed", name, str(exc)))
            values[key] = ParseError
    return values, findings


def _get(values: dict, key: str) -> Any:
    value = values.get(key)
    return None if value is ParseError else value


def analyze_host(raw: HostRaw, manifest: StackManifest, thresholds: Thresholds,
                 facts: dict[str, Fact] | None = None) -> HostReport:
    facts = facts or all_facts()
    report = HostReport(raw.host, raw.unreachable is None, raw.unreachable, seconds=raw.seconds)
    if raw.unreachable is not None:
        report.findings.append(Finding(raw.host, None, ERROR, "unreachable", "host", f"not audited: {raw.unreachable}"))
        report.components = {c: None for c in COMPONENTS}
        return report
    values, findings = _values(raw, facts)
    report.findings += findings
    add = report.findings.append
    host = raw.host

    driver = _get(values, "driver_version")
    firmware = _get(values, "firmware_version")
    toolkit = _get(values, "toolkit_info")
    kernels = _get(values, "kernels_info")
    nnal = _get(values, "nnal_info")
    stack = _get(values, "python_stack")
    packages = (stack or {}).get("packages") or {}
    report.components = {
        "driver": (driver or {}).get("Version"),
        "firmware": (firmware or {}).get("Version"),
        "cann_toolkit": (toolkit or {}).get("version"),
        "cann_kernels": (kernels or {}).get("version_dir"),
        "cann_nnal": (nnal or {}).get("Ascend-cann-atb"),
        "python": (stack or {}).get("python"),
        **{name: packages.get(name) for name in ("numpy", "torch", "torch_npu", "vllm", "vllm_ascend", "verl")},
    }

    pins = {
        "driver": manifest.artifact("driver").version,
        "firmware": manifest.artifact("firmware").version,
        "cann_toolkit": manifest.artifact("cann_toolkit").version,
        "cann_kernels": manifest.artifact("cann_kernels").version,
        "cann_nnal": manifest.artifact("cann_nnal").version,
    }
    for component, pinned in pins.items():
        have = report.components[component]
        fact_key = {"driver": "driver_version", "firmware": "firmware_version", "cann_toolkit": "toolkit_info",
                    "cann_kernels": "kernels_info", "cann_nnal": "nnal_info"}[component]
        if values.get(fact_key) is ParseError:
            continue
        if have is None:
            add(Finding(host, None, ERROR, f"{component.replace('_', '-')}-missing", component,
                        f"{component} is not installed (pinned {pinned})", pinned, None))
        elif have != pinned:
            add(Finding(host, None, ERROR, f"{component.replace('_', '-')}-off-pin", component,
                        f"{component} is {have}, the stack pins {pinned}", pinned, have))

    for problem in check_compatibility(driver, firmware, toolkit).problems:
        add(Finding(host, None, ERROR, "incompatible", problem.rule, problem.message))

    if stack is None and values.get("python_stack") is not ParseError:
        add(Finding(host, None, ERROR, "python-stack-missing", "python",
                    "no Python environment (neither the dapo_ops fact file nor the conda env)"))
    elif stack is not None:
        for problem in python_stack_problems(stack, manifest):
            add(Finding(host, None, ERROR, "stack-off-pin", problem.split()[0], problem))

    _npu_findings(raw, values, report, manifest, thresholds)
    missing = {f.npu for f in report.findings if f.code == "npu-missing"}
    # a missing NPU's own queries fail too; its npu-missing finding already says why
    report.findings = [f for f in report.findings if not (f.code == "collect-failed" and f.npu in missing)]
    return report


def _npu_findings(raw: HostRaw, values: dict, report: HostReport, manifest: StackManifest,
                  thresholds: Thresholds) -> None:
    host, add = raw.host, report.findings.append
    info = _get(values, "npu_smi_info")
    if info is None:
        if values.get("npu_smi_info") is not ParseError and raw.npus_expected:
            add(Finding(host, None, ERROR, "npu-smi-missing", "driver",
                        "npu-smi is not available: no NPU driver is loaded"))
        return
    by_id = {n["npu_id"]: n for n in info["npus"]}
    busy = {p["npu_id"] for p in info["processes"]}
    pinned_fw = manifest.artifact("firmware").version
    missing = [i for i in range(raw.npus_expected) if i not in by_id]
    for npu_id in missing:
        add(Finding(host, npu_id, ERROR, "npu-missing", "npu",
                    f"NPU {npu_id} is missing ({len(by_id)} of {raw.npus_expected} NPUs answer npu-smi)",
                    str(raw.npus_expected), str(len(by_id))))
    for npu_id in sorted(set(by_id) | set(range(raw.npus_expected))):
        chip = by_id.get(npu_id)
        board = _get(values, f"board.{npu_id}")
        link = _get(values, f"link.{npu_id}")
        health = _get(values, f"net_health.{npu_id}")
        ip = _get(values, f"ip.{npu_id}")
        report.npus.append({
            "id": npu_id, "present": chip is not None,
            "health": chip["health"] if chip else None, "temp_c": chip["temp_c"] if chip else None,
            "hbm_used_mb": chip["hbm_used_mb"] if chip else None, "hbm_total_mb": chip["hbm_total_mb"] if chip else None,
            "firmware": (board or {}).get("firmware_version"), "compatibility": (board or {}).get("compatibility"),
            "link": link, "net_health": health, "ip": (ip or {}).get("address"),
        })
        if chip is None:
            continue
        if chip["health"] != "OK":
            add(Finding(host, npu_id, ERROR, "npu-unhealthy", "npu", f"NPU {npu_id} health is {chip['health']}",
                        "OK", chip["health"]))
        if chip["temp_c"] is not None and chip["temp_c"] > thresholds.temp_c:
            add(Finding(host, npu_id, WARNING, "npu-hot", "npu",
                        f"NPU {npu_id} is at {chip['temp_c']} C (threshold {thresholds.temp_c} C)",
                        f"<= {thresholds.temp_c}", str(chip["temp_c"])))
        if chip["hbm_used_mb"] > thresholds.hbm_used_mb or npu_id in busy:
            add(Finding(host, npu_id, WARNING, "hbm-in-use", "npu",
                        f"NPU {npu_id} already uses {chip['hbm_used_mb']} MB of HBM"
                        + (" (processes running on it)" if npu_id in busy else ""),
                        f"<= {thresholds.hbm_used_mb}", str(chip["hbm_used_mb"])))
        if board is not None:
            if board["firmware_version"] != pinned_fw:
                add(Finding(host, npu_id, ERROR, "npu-firmware-off-pin", "firmware",
                            f"NPU {npu_id} runs firmware {board['firmware_version']}, the stack pins {pinned_fw}",
                            pinned_fw, board["firmware_version"]))
            if board["compatibility"] != "OK":
                add(Finding(host, npu_id, ERROR, "npu-incompatible", "firmware",
                            f"NPU {npu_id} reports Compatibility {board['compatibility']} for its driver and firmware",
                            "OK", board["compatibility"]))
        if link is not None and link != "UP":
            add(Finding(host, npu_id, ERROR, "link-down", "nic", f"NPU {npu_id} NIC link is {link}", "UP", link))
        if health is not None and health != "Success":
            add(Finding(host, npu_id, ERROR, "net-unhealthy", "nic", f"NPU {npu_id} NIC net health is {health}",
                        "Success", health))
        if ip is not None and ip.get("address") is None:
            add(Finding(host, npu_id, WARNING, "no-device-ip", "nic", f"NPU {npu_id} NIC has no device IP"))


def majority_findings(reports: list[HostReport], manifest: StackManifest) -> None:
    """A host on the pin that differs from the fleet's majority gets a warning (off-pin hosts already have errors)."""
    reachable = [r for r in reports if r.reachable]
    if len(reachable) < 3:
        return
    pins = {"driver": manifest.artifact("driver").version, "firmware": manifest.artifact("firmware").version,
            "cann_toolkit": manifest.artifact("cann_toolkit").version,
            "cann_kernels": manifest.artifact("cann_kernels").version,
            "cann_nnal": manifest.artifact("cann_nnal").version, **pinned_python_packages(manifest)}
    for component in COMPONENTS:
        counts = Counter(r.components.get(component) for r in reachable)
        value, count = counts.most_common(1)[0]
        if count * 2 <= len(reachable):
            continue
        for r in reachable:
            have = r.components.get(component)
            if have != value and have is not None and have == pins.get(component):
                r.findings.append(Finding(r.host, None, WARNING, "differs-from-majority", component,
                                          f"{component} {have} is on the pin but {count} of {len(reachable)} hosts run "
                                          f"{value}", value, have))


def analyze(raws: list[HostRaw], manifest: StackManifest, thresholds: Thresholds | None = None,
            interrupted: bool = False) -> AuditReport:
    facts = all_facts()
    reports = [analyze_host(raw, manifest, thresholds or Thresholds(), facts) for raw in raws]
    majority_findings(reports, manifest)
    return AuditReport(manifest.name, reports, interrupted)
