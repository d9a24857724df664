"""From collected facts to findings: against the pinned stack and against the fleet's majority (pure)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker
from packaging.version import InvalidVersion, Version

from dapo_ops.ascend.compat import check_compatibility
from dapo_ops.ascend.nic import GOOD_NIC, nic_faults

from dapo_ops.audit.collect import HostRaw
from dapo_ops.audit.fact import Fact, all_facts
from dapo_ops.errors import ParseError, UsageError
from dapo_ops.manifest import StackManifest
from dapo_ops.stack.lock import LockedPackage, LockParseError, normalize_name, parse_lock, platform_environment
from dapo_ops.stackcheck import pinned_python_packages, python_stack_problems

ERROR, WARNING, INFO = "error", "warning", "info"
# Installed from their source checkouts (editable), never in the lock (manifest lock: comment), and the installer's
# own bootstrap tools when a lock does not pin them: not "extra".
NOT_LOCKED = frozenset({"vllm", "vllm-ascend", "verl"})
BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})
# `uname -m` / platform.machine() spellings of the lock platforms' names
MACHINES = {"arm64": "aarch64", "aarch64": "aarch64", "x86_64": "x86_64", "amd64": "x86_64"}
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
    # the env's distributions against the lock of the host's platform (None: the env was not listed)
    closure: dict[str, Any] | None = None
    dists: dict[str, str] = field(default_factory=dict)
    notes: list[Finding] = field(default_factory=list)   # severity "info": neither errors nor warnings


@dataclass
class AuditReport:
    manifest: str
    hosts: list[HostReport]
    interrupted: bool = False

    @property
    def findings(self) -> list[Finding]:
        return [f for h in self.hosts for f in h.findings]

    @property
    def notes(self) -> list[Finding]:
        return [n for h in self.hosts for n in h.notes]

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
                               "npus": h.npus, "findings": [asdict(f) for f in h.findings],
                               "closure": h.closure, "notes": [asdict(n) for n in h.notes]} for h in self.hosts},
            "findings": [asdict(f) for f in self.findings],
            "notes": [asdict(n) for n in self.notes],
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


def load_locks(manifest: StackManifest, directory=None) -> dict[str, dict[str, LockedPackage]]:
    """The lock in force for each node platform (manifest `lock:`), parsed; reads the lock dir (the edge of
    analyze). A lock in force that cannot be read or parsed is a usage error (one line, exit 2)."""
    if manifest.lock is None:
        return {}
    from dapo_ops.stack.lockgen import lock_dir

    base = lock_dir(manifest, directory)
    locks = {}
    for platform in manifest.lock.platforms.values():
        if not platform.in_force:
            continue
        path = base / platform.file
        try:
            text = path.read_text()
        except OSError as exc:
            raise UsageError(f"the {platform.name} lock {path} is in force but cannot be read: "
                             f"{exc.strerror}") from None
        try:
            locks[platform.name] = parse_lock(text, str(path))
        except LockParseError as exc:
            raise UsageError(f"the {platform.name} lock is in force but does not parse: {exc}") from None
    return locks


def load_host_locks(raws: list[HostRaw]) -> dict[str, dict[str, LockedPackage]]:
    """The locks the inventory names per host (dapo_stack_lock), parsed, keyed by their path (the edge of analyze)."""
    locks = {}
    for path in sorted({raw.lock for raw in raws if raw.lock and "python_dists" in raw.outputs}):
        try:
            locks[path] = parse_lock(Path(path).read_text(), path)
        except OSError as exc:
            raise UsageError(f"the inventory's dapo_stack_lock {path} cannot be read: {exc.strerror}") from None
        except LockParseError as exc:
            raise UsageError(f"the inventory's dapo_stack_lock does not parse: {exc}") from None
    return locks


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _applies(package: LockedPackage, environment: dict[str, str]) -> bool:
    if not package.markers:
        return True
    try:
        return Marker(package.markers).evaluate(environment)
    except InvalidMarker:
        return True


def closure_findings(host: str, dists_fact: dict, locks: dict[str, dict[str, LockedPackage]],
                     manifest: StackManifest, lock_path: str | None = None
                     ) -> tuple[dict[str, Any], list[Finding], list[Finding]]:
    """Compare the env's installed distributions with the lock in force for the host's machine (pure).

    Returns (closure summary, findings, notes): off-lock (installed version differs) and missing (locked for this
    platform by its markers, not installed) are errors; extra (installed, not in the lock; the source installs and
    the bootstrap tools excepted) is a warning; no lock in force for the platform is one note. A host whose
    inventory names its lock (dapo_stack_lock, `lock_path`, parsed in `locks` under that path) is compared with it."""
    machine = MACHINES.get(dists_fact["machine"], dists_fact["machine"])
    installed = dists_fact["dists"]
    summary: dict[str, Any] = {"machine": machine, "lock": None, "installed": len(installed),
                               "off_lock": 0, "missing": 0, "extra": 0}
    locked = locks.get(lock_path) if lock_path else locks.get(machine)
    label = f"{machine} (dapo_stack_lock)" if lock_path else machine
    if locked is None:
        platform = manifest.lock.platforms.get(machine) if manifest.lock else None
        why = f" ({platform.reason})" if platform is not None and platform.reason else ""
        note = Finding(host, None, INFO, "lock-not-in-force", "python",
                       f"no lock in force for {machine}: the closure is not audited{why}", None, machine)
        return summary, [], [note]
    summary["lock"] = label
    python = dists_fact.get("python") or f"{manifest.python_version}.0"
    environment = platform_environment(machine, ".".join(python.split(".")[:2]))
    environment.update(python_full_version=python, implementation_version=python)
    findings = []
    for name, package in sorted(locked.items()):
        have = installed.get(name)
        if have is None:
            if _applies(package, environment):
                summary["missing"] += 1
                findings.append(Finding(host, None, ERROR, "dist-missing", name,
                                        f"{name} is not installed (the {label} lock pins {package.version})",
                                        package.version, None))
        elif not _same_version(have, package.version):
            summary["off_lock"] += 1
            findings.append(Finding(host, None, ERROR, "dist-off-lock", name,
                                    f"{name} is {have}, the {label} lock pins {package.version}",
                                    package.version, have))
    for name, have in sorted(installed.items()):
        if name in locked or name in NOT_LOCKED or name in BOOTSTRAP:
            continue
        summary["extra"] += 1
        findings.append(Finding(host, None, WARNING, "dist-extra", name,
                                f"{name} {have} is installed but not in the {label} lock", None, have))
    return summary, findings, []


def analyze_host(raw: HostRaw, manifest: StackManifest, thresholds: Thresholds,
                 facts: dict[str, Fact] | None = None,
                 locks: dict[str, dict[str, LockedPackage]] | None = None) -> HostReport:
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

    dists = _get(values, "python_dists")
    if dists is not None:
        report.dists = dists["dists"]
        report.closure, found, report.notes = closure_findings(host, dists, locks or {}, manifest, raw.lock)
        report.findings += found

    _npu_findings(raw, values, report, manifest, thresholds)
    return report


def _npu_findings(raw: HostRaw, values: dict, report: HostReport, manifest: StackManifest,
                  thresholds: Thresholds) -> None:
    """Per-device findings from npu-smi info, each NPU's board and each device's NIC.

    What the audit counts is the *device*: one per chip, the index of /dev/davinciN, of `hccn_tool -i N` and of
    ASCEND_RT_VISIBLE_DEVICES, and what Ray counts as an "NPU" resource (ray-project/ray
    python/ray/_private/accelerators/npu.py: NPUAcceleratorManager counts acl.rt.get_device_count() or
    /dev/davinci*) and verl's trainer.n_gpus_per_node asks for (verl v0.7.0
    examples/grpo_trainer/run_qwen3_4b_grpo_vllm_1k_npu.sh runs an 8-card A3 with trainer_n_gpus_per_node=16). So
    the inventory's npus_per_node (raw.npus_expected) is compared with the number of chips npu-smi lists:
    on a 910B (Atlas 800T A2, one chip per NPU) that is the number of NPUs, 8; on an Atlas 800T A3 (two chips per
    NPU) it is 16 devices on 8 NPUs. A device is a chip's Phy-ID on an A3 and the NPU id on a 910B.

    The per-device facts link/net_health/ip are read at the device index; the board (driver/firmware
    Compatibility) is per NPU, read at the NPU id (board.N with N beyond the NPU ids of an A3 names no NPU, so its
    failure is not a finding). Finding.npu and report.npus[].id are device indexes; messages name an A3 device as
    "NPU n chip c (device d)" and a 910B one as "NPU n", as before.
    """
    host, add = raw.host, report.findings.append
    info = _get(values, "npu_smi_info")
    if info is None:
        if values.get("npu_smi_info") is not ParseError and raw.npus_expected:
            add(Finding(host, None, ERROR, "npu-smi-missing", "driver",
                        "npu-smi is not available: no NPU driver is loaded"))
        return
    chips = info["npus"]  # one entry per chip
    by_device = {c["device_id"]: c for c in chips}
    npu_chips: dict[int, list[dict]] = {}
    for c in chips:
        npu_chips.setdefault(c["npu_id"], []).append(c)
    multi = any(c["phy_id"] is not None for c in chips) or any(len(cs) > 1 for cs in npu_chips.values())
    noun = "devices" if multi else "NPUs"
    busy = {(p["npu_id"], p["chip_id"]) for p in info["processes"]}
    pinned_fw = manifest.artifact("firmware").version
    expected = raw.npus_expected

    def label(chip: dict | None, device: int) -> str:
        if chip is None:
            return f"device {device}" if multi else f"NPU {device}"
        return f"NPU {chip['npu_id']} chip {chip['chip_id']} (device {device})" if multi else f"NPU {chip['npu_id']}"

    if multi:
        # board.N of an index that is no NPU id (A3: devices 8..15 of 8 NPUs) was asked of a card that does not exist
        report.findings[:] = [f for f in report.findings if not (
            f.code == "collect-failed" and f.component == "board" and f.npu not in npu_chips)]
    for device in [d for d in range(expected) if d not in by_device]:
        add(Finding(host, device, ERROR, "npu-missing", "npu",
                    f"{label(None, device)} is missing ({len(by_device)} of {expected} {noun} answer npu-smi)",
                    str(expected), str(len(by_device))))
    if expected and len(by_device) > expected:  # 0: a bundle that does not say how many it expects
        shape = f" ({len(npu_chips)} NPUs x {max(len(cs) for cs in npu_chips.values())} chips)" if multi else ""
        add(Finding(host, None, WARNING, "npu-count-mismatch", "npu",
                    f"npu-smi lists {len(by_device)} {noun}{shape} but the inventory's npus_per_node is {expected}"
                    + (" (npus_per_node counts devices: each chip of an A3 NPU is one, as Ray and verl count them)"
                       if multi else ""),
                    str(expected), str(len(by_device))))
    for device in sorted(set(by_device) | set(range(expected))):
        chip = by_device.get(device)
        npu_id = chip["npu_id"] if chip is not None else (None if multi else device)
        board = _get(values, f"board.{npu_id}") if npu_id is not None else None
        link = _get(values, f"link.{device}")
        health = _get(values, f"net_health.{device}")
        ip = _get(values, f"ip.{device}")
        report.npus.append({
            "id": device, "present": chip is not None,
            "health": chip["health"] if chip else None, "temp_c": chip["temp_c"] if chip else None,
            "hbm_used_mb": chip["hbm_used_mb"] if chip else None, "hbm_total_mb": chip["hbm_total_mb"] if chip else None,
            "firmware": (board or {}).get("firmware_version"), "compatibility": (board or {}).get("compatibility"),
            "link": link, "net_health": health, "ip": (ip or {}).get("address"),
        })
        if chip is None:
            continue
        name = label(chip, device)
        if chip["health"] != "OK":
            add(Finding(host, device, ERROR, "npu-unhealthy", "npu", f"{name} health is {chip['health']}",
                        "OK", chip["health"]))
        if chip["temp_c"] is not None and chip["temp_c"] > thresholds.temp_c:
            add(Finding(host, device, WARNING, "npu-hot", "npu",
                        f"{name} is at {chip['temp_c']} C (threshold {thresholds.temp_c} C)",
                        f"<= {thresholds.temp_c}", str(chip["temp_c"])))
        in_use = (chip["npu_id"], chip["chip_id"]) in busy
        if chip["hbm_used_mb"] > thresholds.hbm_used_mb or in_use:
            add(Finding(host, device, WARNING, "hbm-in-use", "npu",
                        f"{name} already uses {chip['hbm_used_mb']} MB of HBM"
                        + (" (processes running on it)" if in_use else ""),
                        f"<= {thresholds.hbm_used_mb}", str(chip["hbm_used_mb"])))
        # the board is the NPU's: judged once, on the NPU's first device
        if board is not None and device == min(c["device_id"] for c in npu_chips[npu_id]):
            card = f"NPU {npu_id}" + (f" (devices {', '.join(str(c['device_id']) for c in npu_chips[npu_id])})"
                                      if multi else "")
            if board["firmware_version"] != pinned_fw:
                add(Finding(host, device, ERROR, "npu-firmware-off-pin", "firmware",
                            f"{card} runs firmware {board['firmware_version']}, the stack pins {pinned_fw}",
                            pinned_fw, board["firmware_version"]))
            if board["compatibility"] != "OK":
                add(Finding(host, device, ERROR, "npu-incompatible", "firmware",
                            f"{card} reports Compatibility {board['compatibility']} for its driver and firmware",
                            "OK", board["compatibility"]))
        faults = nic_faults(link=link, net_health=health)
        if "link" in faults:
            add(Finding(host, device, ERROR, "link-down", "nic", f"{name} NIC link is {link}", GOOD_NIC["link"], link))
        if "net_health" in faults:
            add(Finding(host, device, ERROR, "net-unhealthy", "nic", f"{name} NIC net health is {health}",
                        GOOD_NIC["net_health"], health))
        if ip is not None and ip.get("address") is None:
            add(Finding(host, device, WARNING, "no-device-ip", "nic", f"{name} NIC has no device IP"))
    missing = {f.npu for f in report.findings if f.code == "npu-missing"}
    # a missing device's own queries fail too; its npu-missing finding already says why (an A3 board is indexed by
    # NPU id, not device: the filter above covers it)
    report.findings[:] = [f for f in report.findings if not (
        f.code == "collect-failed" and f.npu in missing and not (multi and f.component == "board"))]


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
        majority = _majority([r.components.get(component) for r in reachable])
        if majority is None:
            continue
        value, count = majority
        for r in reachable:
            have = r.components.get(component)
            if have != value and have is not None and have == pins.get(component):
                r.findings.append(Finding(r.host, None, WARNING, "differs-from-majority", component,
                                          f"{component} {have} is on the pin but {count} of {len(reachable)} hosts run "
                                          f"{value}", value, have))
    _closure_majority(reachable)


def _majority(values: list) -> tuple[object, int] | None:
    """The value more than half of the hosts have (missing ones count as None), with its count; None when no value
    has a strict majority."""
    value, count = Counter(values).most_common(1)[0]
    return (value, count) if count * 2 > len(values) else None


def _closure_majority(reachable: list[HostReport]) -> None:
    """The same rule for every locked distribution, among the hosts of one platform whose lock is in force: a host
    on the lock whose version differs from the majority's gets a warning (an off-lock host already has an error).
    The packages the component rule above covers (torch, numpy, ...) are left to it."""
    covered = {normalize_name(c) for c in COMPONENTS}
    by_platform: dict[str, list[HostReport]] = {}
    for r in reachable:
        if r.closure is not None and r.closure["lock"] is not None:
            by_platform.setdefault(r.closure["lock"], []).append(r)
    for platform, hosts in sorted(by_platform.items()):
        if len(hosts) < 3:
            continue
        locked_off = {(f.host, f.component) for r in hosts for f in r.findings
                      if f.code in ("dist-off-lock", "dist-missing")}
        names = sorted({n for r in hosts for n in r.dists} - covered - NOT_LOCKED - BOOTSTRAP)
        for name in names:
            majority = _majority([r.dists.get(name) for r in hosts])
            if majority is None:
                continue
            value, count = majority
            for r in hosts:
                have = r.dists.get(name)
                if have is None or have == value or (r.host, name) in locked_off:
                    continue
                if any(f.host == r.host and f.component == name and f.code == "dist-extra" for f in r.findings):
                    continue
                r.findings.append(Finding(r.host, None, WARNING, "differs-from-majority", name,
                                          f"{name} {have} is on the {platform} lock but {count} of {len(hosts)} "
                                          f"{platform} hosts run {value}", value, have))


def analyze(raws: list[HostRaw], manifest: StackManifest, thresholds: Thresholds | None = None,
            interrupted: bool = False, locks: dict[str, dict[str, LockedPackage]] | None = None) -> AuditReport:
    """Judge every host. `locks` (platform -> parsed lock) defaults to the manifest's locks in force, read only when
    some host's distributions were collected."""
    facts = all_facts()
    if locks is None:
        locks = load_locks(manifest) if any("python_dists" in raw.outputs for raw in raws) else {}
        locks.update(load_host_locks(raws))
    reports = [analyze_host(raw, manifest, thresholds or Thresholds(), facts, locks) for raw in raws]
    majority_findings(reports, manifest)
    return AuditReport(manifest.name, reports, interrupted)
