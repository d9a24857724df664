"""From collected facts to findings (pure but for reading the locks): each host's stack against the pins (the Ascend
components, their compatibility, the Python stack, the Python closure against the lock), its NPUs (npus.py), then
the fleet's majority (majority.py)."""

from __future__ import annotations

from typing import Any

from dapo_ops.ascend.compat import check_compatibility

from dapo_ops.audit.closure import Locks, closure_findings, load_host_locks, load_locks
from dapo_ops.audit.collect import HostRaw
from dapo_ops.audit.fact import Fact, all_facts
from dapo_ops.audit.majority import majority_findings
from dapo_ops.audit.model import COMPONENTS, ERROR, INFO, WARNING, AuditReport, Finding, HostReport, Thresholds
from dapo_ops.audit.npus import fact_value, npu_findings, tls_findings
from dapo_ops.errors import ParseError
from dapo_ops.manifest import ASCEND_COMPONENTS, StackManifest
from dapo_ops.stackcheck import python_stack_problems

# the audit fact that reads each Ascend component's version file
FACT_OF = {"driver": "driver_version", "firmware": "firmware_version", "cann_toolkit": "toolkit_info",
           "cann_kernels": "kernels_info", "cann_nnal": "nnal_info"}
PYTHON_PACKAGES = ("numpy", "torch", "torch_npu", "vllm", "vllm_ascend", "verl")
# what the verify record and the live probe both list (roles/verify/files/stack_probe.py)
RECORDED_PACKAGES = (*PYTHON_PACKAGES, "ray", "protobuf")


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


def _components(values: dict, manifest: StackManifest) -> dict[str, str | None]:
    """The installed version of each component (None: not installed or not read)."""
    stack = fact_value(values, "python_stack") or {}
    packages = stack.get("packages") or {}
    return {
        **{key: manifest.artifact(key).installed_version(fact_value(values, FACT_OF[key]))
           for key in ASCEND_COMPONENTS},
        "python": stack.get("python"),
        **{name: packages.get(name) for name in PYTHON_PACKAGES},
    }


def _ascend_findings(host: str, values: dict, components: dict, manifest: StackManifest) -> list[Finding]:
    """Each Ascend component missing or off its pin (one whose version file did not parse has its collect-failed);
    then the compatibility rules of the driver, firmware and toolkit installed."""
    findings = []
    for component in ASCEND_COMPONENTS:
        pinned, have = manifest.artifact(component).version, components[component]
        code = component.replace("_", "-")
        if values.get(FACT_OF[component]) is ParseError:
            continue
        if have is None:
            findings.append(Finding(host, None, ERROR, f"{code}-missing", component,
                                    f"{component} is not installed (pinned {pinned})", pinned, None))
        elif have != pinned:
            findings.append(Finding(host, None, ERROR, f"{code}-off-pin", component,
                                    f"{component} is {have}, the stack pins {pinned}", pinned, have))
    driver, firmware, toolkit = (fact_value(values, FACT_OF[c]) for c in ("driver", "firmware", "cann_toolkit"))
    findings += [Finding(host, None, ERROR, "incompatible", problem.rule, problem.message)
                 for problem in check_compatibility(driver, firmware, toolkit).problems]
    return findings


def _vendor_pairing(host: str, components: dict, manifest: StackManifest) -> list[Finding]:
    """Information, not an error: a driver outside the HDK series Huawei pairs with the pinned CANN (the manifest's
    vendor_hdk; the pin itself is the seed's pair, outside it on purpose)."""
    series, source = manifest.vendor_hdk()
    driver, cann = components.get("driver"), manifest.artifact("cann_toolkit").version
    if not series or not driver or ".".join(str(driver).split(".")[:2]) in series:
        return []
    return [Finding(host, None, INFO, "hdk-outside-vendor-pairing", "driver",
                    f"driver {driver} is outside the HDK Huawei pairs with CANN {cann} ({', '.join(series)}.x: "
                    f"{source}); dapo-ops pins the pair the seed's author ran", ", ".join(series), str(driver))]


def _python_stack_findings(host: str, values: dict, manifest: StackManifest) -> list[Finding]:
    """No Python environment, its packages off the pins or failing to import (live), the CANN environment script
    missing, and a verify record that disagrees with the live answer."""
    stack = fact_value(values, "python_stack")
    if stack is not None:
        findings = [Finding(host, None, ERROR, "stack-off-pin", problem.split()[0], problem)
                    for problem in python_stack_problems(stack, manifest)]
        return (findings + _import_findings(host, values) + _environment_findings(host, stack)
                + _record_findings(host, stack))
    if values.get("python_stack") is ParseError:
        return []
    return [Finding(host, None, ERROR, "python-stack-missing", "python",
                    "no Python environment (neither the dapo_ops fact file nor the conda env)")]


def _import_findings(host: str, values: dict) -> list[Finding]:
    """Each module of the env (or of the job's own path) that does not import, named by its distribution."""
    sweep = fact_value(values, "import_sweep")
    if not isinstance(sweep, dict):
        return []
    return [Finding(host, None, ERROR, "import-fails", failure["dist"], failure["line"])
            for failure in sweep.get("errors") or []]


def _environment_findings(host: str, stack: dict) -> list[Finding]:
    state, script = stack.get("env"), stack.get("env_script")
    if state == "missing":
        return [Finding(host, None, ERROR, "cann-env-missing", "environment",
                        f"the CANN environment script {script} is missing: no job can import torch_npu "
                        "(run site.yml to write it)")]
    if state == "failed":
        return [Finding(host, None, ERROR, "cann-env-failed", "environment",
                        f"sourcing the CANN environment script {script} fails: a set_env.sh it sources is gone "
                        "or broken (run site.yml)")]
    return []


def _record_findings(host: str, stack: dict) -> list[Finding]:
    """The verify role's record against the live query (only for a live query: a legacy bundle has one answer)."""
    record = stack.get("fact_file")
    if stack.get("source") != "live" or record is None:
        return []
    if "error" in record:
        return [Finding(host, None, WARNING, "fact-file-stale", "fact file",
                        f"the verify record is unreadable ({record['error']}); run site.yml to rewrite it")]
    live = stack.get("packages") or {}
    differ = [f"{name} {record['packages'].get(name)} (live {live.get(name)})"
              for name in RECORDED_PACKAGES if record["packages"].get(name) != live.get(name)]
    if bool(record.get("import_errors")) != bool(stack.get("import_errors")):
        differ.append("imports " + ("failing" if record.get("import_errors") else "clean")
                      + " (live " + ("failing" if stack.get("import_errors") else "clean") + ")")
    if not differ:
        return []
    return [Finding(host, None, WARNING, "fact-file-stale", "fact file",
                    "the verify record disagrees with the env, which changed after site.yml verified it: it says "
                    + ", ".join(differ) + "; the live values are audited (run site.yml to re-verify)")]


def _closure(raw: HostRaw, values: dict, report: HostReport, manifest: StackManifest, locks: Locks) -> None:
    """The env's distributions against the lock, when they were listed."""
    dists = fact_value(values, "python_dists")
    if dists is None:
        return
    report.dists = dists["dists"]
    report.closure, found, report.notes = closure_findings(raw.host, dists, locks, manifest, raw.lock)
    report.findings += found


def analyze_host(raw: HostRaw, manifest: StackManifest, thresholds: Thresholds,
                 facts: dict[str, Fact] | None = None, locks: Locks | None = None) -> HostReport:
    report = HostReport(raw.host, raw.unreachable is None, raw.unreachable, seconds=raw.seconds)
    if raw.unreachable is not None:
        report.findings.append(Finding(raw.host, None, ERROR, "unreachable", "host", f"not audited: {raw.unreachable}"))
        report.components = {c: None for c in COMPONENTS}
        return report
    values, report.findings = _values(raw, facts or all_facts())
    report.components = _components(values, manifest)
    report.findings += _ascend_findings(raw.host, values, report.components, manifest)
    report.findings += _python_stack_findings(raw.host, values, manifest)
    _closure(raw, values, report, manifest, locks or {})
    report.notes += _vendor_pairing(raw.host, report.components, manifest)
    npu_findings(raw, values, report, manifest, thresholds)
    return report


def analyze(raws: list[HostRaw], manifest: StackManifest, thresholds: Thresholds | None = None,
            interrupted: bool = False, locks: Locks | None = None) -> AuditReport:
    """Judge every host. `locks` (platform -> parsed lock) defaults to the manifest's locks in force, read only when
    some host's distributions were collected."""
    facts = all_facts()
    if locks is None:
        locks = load_locks(manifest) if any("python_dists" in raw.outputs for raw in raws) else {}
        locks.update(load_host_locks(raws))
    reports = [analyze_host(raw, manifest, thresholds or Thresholds(), facts, locks) for raw in raws]
    majority_findings(reports, manifest)
    tls_findings(reports)
    return AuditReport(manifest.name, reports, interrupted)
