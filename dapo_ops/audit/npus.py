"""Per-device findings: npu-smi's chips against the inventory's NPUS_PER_NODE (missing devices, the count), each
chip's health, temperature and HBM, each NPU's board (firmware, Compatibility) and each device's NIC.

What the audit counts is the *device*: one per chip, the index of /dev/davinciN, of `hccn_tool -i N` and of
ASCEND_RT_VISIBLE_DEVICES, and what Ray counts as an "NPU" resource (ray-project/ray
python/ray/_private/accelerators/npu.py: NPUAcceleratorManager counts acl.rt.get_device_count() or
/dev/davinci*) and verl's trainer.n_gpus_per_node asks for (verl v0.7.0
examples/grpo_trainer/run_qwen3_4b_grpo_vllm_1k_npu.sh runs an 8-card A3 with trainer_n_gpus_per_node=16). So
the inventory's NPUS_PER_NODE (raw.npus_expected) is compared with the number of chips npu-smi lists:
on a 910B (Atlas 800T A2, one chip per NPU) that is the number of NPUs, 8; on an Atlas 800T A3 (two chips per
NPU) it is 16 devices on 8 NPUs. A device is a chip's Phy-ID on an A3 and the NPU id on a 910B.

The per-device facts link/net_health/ip are read at the device index; the board (driver/firmware
Compatibility) is per NPU, read at the NPU id (board.N with N beyond the NPU ids of an A3 names no NPU, so its
failure is not a finding). Finding.npu and report.npus[].id are device indexes; messages name an A3 device as
"NPU n chip c (device d)" and a 910B one as "NPU n", as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dapo_ops.ascend.nic import GOOD_NIC, nic_faults
from dapo_ops.audit.collect import HostRaw
from dapo_ops.audit.model import ERROR, WARNING, Finding, HostReport, Thresholds
from dapo_ops.errors import ParseError
from dapo_ops.manifest import StackManifest
from dapo_ops.model.variables import NPUS_PER_NODE, NPU_TLS


def fact_value(values: dict, key: str) -> Any:
    """A parsed fact's value; None when it was not collected or did not parse."""
    value = values.get(key)
    return None if value is ParseError else value


@dataclass
class Devices:
    """npu-smi's chips on one host, indexed by device and by NPU, and the names messages give them."""
    by_device: dict[int, dict]          # device index -> its chip
    npu_chips: dict[int, list[dict]]    # NPU id -> its chips
    multi: bool                         # several chips per NPU (an A3): devices are named by NPU and chip
    busy: set[tuple[int, int]]          # (NPU id, chip id) with processes running
    expected: int                       # the inventory's NPUS_PER_NODE (0: not said)

    @classmethod
    def from_npu_smi(cls, info: dict, expected: int) -> Devices:
        chips = info["npus"]  # one entry per chip
        npu_chips: dict[int, list[dict]] = {}
        for c in chips:
            npu_chips.setdefault(c["npu_id"], []).append(c)
        # an A3 shows each chip's Phy-ID, or lists several chips under one NPU id; a 910B shows neither
        multi = any(c["phy_id"] is not None for c in chips) or any(len(cs) > 1 for cs in npu_chips.values())
        return cls({c["device_id"]: c for c in chips}, npu_chips, multi,
                   {(p["npu_id"], p["chip_id"]) for p in info["processes"]}, expected)

    @property
    def noun(self) -> str:
        return "devices" if self.multi else "NPUs"

    def indexes(self) -> list[int]:
        """Every device npu-smi lists or the inventory expects."""
        return sorted(set(self.by_device) | set(range(self.expected)))

    def missing(self) -> list[int]:
        return [d for d in range(self.expected) if d not in self.by_device]

    def npu_id(self, device: int) -> int | None:
        """The NPU a device is on (a 910B's missing device is its NPU id; an A3's is not known)."""
        chip = self.by_device.get(device)
        return chip["npu_id"] if chip is not None else (None if self.multi else device)

    def label(self, chip: dict | None, device: int) -> str:
        if chip is None:
            return f"device {device}" if self.multi else f"NPU {device}"
        if self.multi:
            return f"NPU {chip['npu_id']} chip {chip['chip_id']} (device {device})"
        return f"NPU {chip['npu_id']}"

    def card(self, npu_id: int) -> str:
        """An NPU, with its devices on an A3."""
        if not self.multi:
            return f"NPU {npu_id}"
        return f"NPU {npu_id} (devices {', '.join(str(c['device_id']) for c in self.npu_chips[npu_id])})"

    def first_device(self, npu_id: int) -> int:
        return min(c["device_id"] for c in self.npu_chips[npu_id])


@dataclass
class DeviceFacts:
    """What the per-NPU and per-device facts say of one device (None: not collected or not parsed)."""
    board: dict | None
    link: str | None
    health: str | None
    ip: dict | None
    tls: dict | None = None

    @classmethod
    def read(cls, values: dict, devices: Devices, device: int) -> DeviceFacts:
        npu_id = devices.npu_id(device)
        return cls(fact_value(values, f"board.{npu_id}") if npu_id is not None else None,
                   fact_value(values, f"link.{device}"), fact_value(values, f"net_health.{device}"),
                   fact_value(values, f"ip.{device}"), fact_value(values, f"tls.{device}"))


def _npu_row(device: int, chip: dict | None, facts: DeviceFacts) -> dict[str, Any]:
    """The device's entry in report.npus (the JSON document and the report's tables)."""
    board, ip = facts.board or {}, facts.ip or {}
    return {
        "id": device, "present": chip is not None,
        "health": chip["health"] if chip else None, "temp_c": chip["temp_c"] if chip else None,
        "hbm_used_mb": chip["hbm_used_mb"] if chip else None, "hbm_total_mb": chip["hbm_total_mb"] if chip else None,
        "firmware": board.get("firmware_version"), "compatibility": board.get("compatibility"),
        "link": facts.link, "net_health": facts.health, "ip": ip.get("address"),
        "tls": None if facts.tls is None else ("on" if facts.tls["enabled"] else "off"),
    }


def _count_findings(host: str, devices: Devices) -> list[Finding]:
    """Each expected device npu-smi does not list; more devices than NPUS_PER_NODE (0: a bundle that does not
    say)."""
    found, expected = len(devices.by_device), devices.expected
    findings = [Finding(host, device, ERROR, "npu-missing", "npu",
                        f"{devices.label(None, device)} is missing ({found} of {expected} {devices.noun} answer "
                        f"npu-smi)", str(expected), str(found))
                for device in devices.missing()]
    if expected and found > expected:
        shape = (f" ({len(devices.npu_chips)} NPUs x {max(len(cs) for cs in devices.npu_chips.values())} chips)"
                 if devices.multi else "")
        why = f" ({NPUS_PER_NODE} counts devices: each chip of an A3 NPU is one, as Ray and verl count them)"
        findings.append(Finding(host, None, WARNING, "npu-count-mismatch", "npu",
                                f"npu-smi lists {found} {devices.noun}{shape} but the inventory's {NPUS_PER_NODE} "
                                f"is {expected}" + (why if devices.multi else ""), str(expected), str(found)))
    return findings


def _chip_findings(host: str, device: int, chip: dict, name: str, busy: bool,
                   thresholds: Thresholds) -> list[Finding]:
    """The chip's health, temperature and HBM already in use (or processes running on it)."""
    findings = []
    if chip["health"] != "OK":
        findings.append(Finding(host, device, ERROR, "npu-unhealthy", "npu", f"{name} health is {chip['health']}",
                                "OK", chip["health"]))
    if chip["temp_c"] is not None and chip["temp_c"] > thresholds.temp_c:
        findings.append(Finding(host, device, WARNING, "npu-hot", "npu",
                                f"{name} is at {chip['temp_c']} C (threshold {thresholds.temp_c} C)",
                                f"<= {thresholds.temp_c}", str(chip["temp_c"])))
    if chip["hbm_used_mb"] > thresholds.hbm_used_mb or busy:
        findings.append(Finding(host, device, WARNING, "hbm-in-use", "npu",
                                f"{name} already uses {chip['hbm_used_mb']} MB of HBM"
                                + (" (processes running on it)" if busy else ""),
                                f"<= {thresholds.hbm_used_mb}", str(chip["hbm_used_mb"])))
    return findings


def _board_findings(host: str, device: int, board: dict, card: str, pinned_fw: str) -> list[Finding]:
    """The NPU's board: the firmware it runs against the pin, and its driver / firmware Compatibility."""
    findings = []
    if board["firmware_version"] != pinned_fw:
        findings.append(Finding(host, device, ERROR, "npu-firmware-off-pin", "firmware",
                                f"{card} runs firmware {board['firmware_version']}, the stack pins {pinned_fw}",
                                pinned_fw, board["firmware_version"]))
    if board["compatibility"] != "OK":
        findings.append(Finding(host, device, ERROR, "npu-incompatible", "firmware",
                                f"{card} reports Compatibility {board['compatibility']} for its driver and firmware",
                                "OK", board["compatibility"]))
    return findings


def _nic_findings(host: str, device: int, name: str, facts: DeviceFacts) -> list[Finding]:
    """The device's NIC: link, net health and device IP."""
    findings = []
    faults = nic_faults(link=facts.link, net_health=facts.health)
    if "link" in faults:
        findings.append(Finding(host, device, ERROR, "link-down", "nic", f"{name} NIC link is {facts.link}",
                                GOOD_NIC["link"], facts.link))
    if "net_health" in faults:
        findings.append(Finding(host, device, ERROR, "net-unhealthy", "nic",
                                f"{name} NIC net health is {facts.health}", GOOD_NIC["net_health"], facts.health))
    if facts.ip is not None and facts.ip.get("address") is None:
        findings.append(Finding(host, device, WARNING, "no-device-ip", "nic", f"{name} NIC has no device IP"))
    return findings


def _device_findings(host: str, device: int, chip: dict, facts: DeviceFacts, devices: Devices,
                     thresholds: Thresholds, pinned_fw: str) -> list[Finding]:
    """A present device: its chip, its NPU's board (judged once, on the NPU's first device), its NIC."""
    name = devices.label(chip, device)
    findings = _chip_findings(host, device, chip, name, (chip["npu_id"], chip["chip_id"]) in devices.busy, thresholds)
    npu_id = chip["npu_id"]
    if facts.board is not None and device == devices.first_device(npu_id):
        findings += _board_findings(host, device, facts.board, devices.card(npu_id), pinned_fw)
    return findings + _nic_findings(host, device, name, facts)


def _not_a_board_of_an_npu(findings: list[Finding], devices: Devices) -> list[Finding]:
    """board.N of an index that is no NPU id (A3: devices 8..15 of 8 NPUs) was asked of a card that does not exist:
    its collect failure is no finding."""
    return [f for f in findings if not (f.code == "collect-failed" and f.component == "board"
                                        and f.npu not in devices.npu_chips)]


def _not_of_a_missing_device(findings: list[Finding], multi: bool) -> list[Finding]:
    """A missing device's own queries fail too; its npu-missing finding already says why (an A3 board is indexed by
    NPU id, not device: _not_a_board_of_an_npu covers it)."""
    missing = {f.npu for f in findings if f.code == "npu-missing"}
    return [f for f in findings if not (f.code == "collect-failed" and f.npu in missing
                                        and not (multi and f.component == "board"))]


def npu_findings(raw: HostRaw, values: dict, report: HostReport, manifest: StackManifest,
                 thresholds: Thresholds) -> None:
    """Per-device findings from npu-smi info, each NPU's board and each device's NIC, added to report (with
    report.npus); the collect failures they explain are taken out of report.findings."""
    host, add = raw.host, report.findings.append
    info = fact_value(values, "npu_smi_info")
    if info is None:
        if values.get("npu_smi_info") is not ParseError and raw.npus_expected:
            add(Finding(host, None, ERROR, "npu-smi-missing", "driver",
                        "npu-smi is not available: no NPU driver is loaded"))
        return
    devices = Devices.from_npu_smi(info, raw.npus_expected)
    pinned_fw = manifest.artifact("firmware").version
    if devices.multi:
        report.findings[:] = _not_a_board_of_an_npu(report.findings, devices)
    report.findings += _count_findings(host, devices)
    for device in devices.indexes():
        chip = devices.by_device.get(device)
        facts = DeviceFacts.read(values, devices, device)
        report.npus.append(_npu_row(device, chip, facts))
        if chip is not None:
            report.findings += _device_findings(host, device, chip, facts, devices, thresholds, pinned_fw)
    report.findings[:] = _not_of_a_missing_device(report.findings, devices.multi)


def tls_findings(reports: list[HostReport]) -> None:
    """Every NPU of a fleet (or a run) must share the NIC's TLS switch: HCCL's links between NPUs whose switches
    differ never come up, the set-up waits HCCL_CONNECT_TIMEOUT (+20 s) and names no cause, and HDK checks the
    switches up front only from 25.2 on. Mixed switches are an error on each host holding the fewer state (both
    states, when they are as many), listing its NPUs."""
    states = [(r, row["id"], row["tls"]) for r in reports if r.reachable for row in r.npus if row.get("tls")]
    counts = {state: sum(1 for _, _, s in states if s == state) for state in ("on", "off")}
    if not counts["on"] or not counts["off"]:
        return
    odd = {min(counts, key=counts.get)} if counts["on"] != counts["off"] else {"on", "off"}
    for report in reports:
        for state in sorted(odd):
            npus = [device for r, device, s in states if r is report and s == state]
            if not npus:
                continue
            other = "off" if state == "on" else "on"
            report.findings.append(Finding(
                report.host, None, ERROR, "npu-tls-mixed", "nic",
                f"NPU NIC TLS is {state} on {report.host}'s NPUs {_ranges(npus)} but {other} on {counts[other]} of "
                f"the {len(states)} NPUs audited: HCCL's links between them hang until HCCL_CONNECT_TIMEOUT; set "
                f"{NPU_TLS} for the fleet (the hccl_network role applies it) or hccn_tool -i N -tls -s enable 0|1",
                other, state))


def _ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out, ids = [], sorted(ids)
    start = prev = ids[0]
    for n in ids[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ", ".join(out)
