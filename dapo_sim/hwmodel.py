"""The simulated node's hardware model and the fault knobs that change it (pure; no I/O).

Fault spec: ``NODE[.npuK]:KNOB[=VALUE]``, e.g. ``node2.npu3:health=Warning`` or ``node2:firmware=7.5.0.1.129``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from dapo_ops.errors import UsageError

BUS_PREFIXES = ["C1", "C2", "81", "82", "01", "02", "41", "42", "C3", "C4", "83", "84", "03", "04", "43", "44"]
HEALTH_VALUES = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
OUT_OF_RANGE_PAIR = ("24.1.rc2", "7.3.0.1.231")  # a real report: driver [7.0.0,7.2.99] + firmware 7.3 (docs/ascend-formats.md §5.1)

# The simulated nodes' memory unless a fault says otherwise: a size a training server is sold with, not a vendor's
# figure for a given model; the shipped job needs about 458 GiB per node on 2 x 8 and 717 on 2 x 16.
SIM_HOST_MEM_GIB = 1536
# The size of each simulated node's data filesystem at SIM_DATA_DIR (a tmpfs: a limit, pages taken only when written),
# again a size servers are sold with (2 x 1.92 TB NVMe), so that launch's check of the checkpoints' space sees one
SIM_DISK_GIB = 3576
SIM_DATA_DIR = "/var/lib/dapo-ops/checkpoints"

NODE_KNOBS = {
    "driver": "start with this driver version installed (pinned or from the simulator's catalog)",
    "firmware": "start with this firmware installed and active (and the driver it shipped with)",
    "hdk": "'out-of-range': start on an incompatible driver/firmware pair (24.1.rc2 + 7.3.0.1.231)",
    "installer": "'dkms-fail': the driver installer fails with 'Dkms install failed'",
    "driver-half-installed": "start with driver version.info present but driver/tools/upgrade-tool missing",
    "tls": "on | off: every NPU NIC's TLS switch (hccn_tool -tls; default off, as the public hccn.conf samples)",
    "host-mem-gib": f"the node's memory in GiB, as its /proc/meminfo reports it (default {SIM_HOST_MEM_GIB})",
    "disk-gib": f"the size in GiB of the node's filesystem at {SIM_DATA_DIR}, as df reports it (default {SIM_DISK_GIB})",
}
NPU_KNOBS = {
    "health": "Warning | Alarm | Critical | UNKNOWN",
    "missing": "the NPU is not detected (no PCI function, no /dev/davinciK, absent from npu-smi)",
    "temp": "NPU temperature in C, pinned (load does not move it)",
    "link": "UP | DOWN (hccn_tool -link)",
    "net_health": "e.g. Fault (hccn_tool -net_health)",
    "no-ip": "no device IP configured ('Get ipconf failed ...')",
    "hbm-used": "HBM already in use, in MB",
    "roce": "'unreachable': the NPU's port is cut off from the RoCE fabric (link stays UP; hccn_tool -ping fails)",
}


@dataclass(frozen=True)
class Fault:
    node: str
    npu: int | None
    knob: str
    value: str | None

    def __str__(self) -> str:
        where = self.node + (f".npu{self.npu}" if self.npu is not None else "")
        return f"{where}:{self.knob}" + (f"={self.value}" if self.value is not None else "")


# knobs that take no value; every other knob needs one
NO_VALUE_KNOBS = ("missing", "no-ip", "driver-half-installed")
# knob -> (does a value fit, what the value must be): a knob with no rule takes any non-empty value
VALUE_RULES = {
    "health": (lambda v: v in HEALTH_VALUES[1:], f"must be one of {', '.join(HEALTH_VALUES[1:])}"),
    "temp": (str.isdigit, "must be a whole number"),
    "hbm-used": (str.isdigit, "must be a whole number"),
    "tls": (lambda v: v in ("on", "off"), "must be on or off"),
    "host-mem-gib": (lambda v: v.isdigit() and 0 < int(v) <= 1 << 20, "must be a whole number of GiB (1-1048576)"),
    "disk-gib": (lambda v: v.isdigit() and 0 < int(v) <= 1 << 20, "must be a whole number of GiB (1-1048576)"),
    "link": (lambda v: v in ("UP", "DOWN"), "must be UP or DOWN"),
    "roce": (lambda v: v == "unreachable", "accepts only 'unreachable'"),
    "hdk": (lambda v: v == "out-of-range", "accepts only 'out-of-range'"),
    "installer": (lambda v: v == "dkms-fail", "accepts only 'dkms-fail'"),
}


def _where(spec: str, where: str) -> tuple[str, int | None]:
    node, dot, npu_part = where.partition(".")
    if not dot:
        return node, None
    if not npu_part.startswith("npu") or not npu_part[3:].isdigit():
        raise UsageError(f"fault {spec!r}: {npu_part!r} is not npuK (e.g. npu3)")
    return node, int(npu_part[3:])


def _check_value(spec: str, knob: str, value: str | None, knobs: dict[str, str]) -> None:
    if knob in NO_VALUE_KNOBS:
        if value is not None:
            raise UsageError(f"fault {spec!r}: {knob} takes no value")
        return
    if not value:
        raise UsageError(f"fault {spec!r}: {knob} needs a value ({knobs[knob]})")
    fits, rule = VALUE_RULES.get(knob, (lambda v: True, ""))
    if not fits(value):
        raise UsageError(f"fault {spec!r}: {knob} {rule}")


def parse_fault(spec: str) -> Fault:
    """Parse one --fault SPEC; raises UsageError with the accepted forms."""
    where, sep, what = spec.partition(":")
    if not sep or not where or not what:
        raise UsageError(f"fault {spec!r}: expected NODE[.npuK]:KNOB[=VALUE], e.g. node2.npu3:health=Warning")
    node, npu = _where(spec, where)
    knob, eq, value = what.partition("=")
    knobs = NPU_KNOBS if npu is not None else NODE_KNOBS
    if knob not in knobs:
        scope = "NPU" if npu is not None else "node"
        raise UsageError(f"fault {spec!r}: unknown {scope} knob {knob!r} (known: {', '.join(knobs)})")
    _check_value(spec, knob, value if eq else None, knobs)
    return Fault(node, npu, knob, value if eq else None)


# NPUs per node of the products the simulator models: an Atlas 800T A2 server has 8 (vllm-ascend v0.11.0rc1
# docs/source/tutorials/multi_node.md, "Atlas 800 A2 (64G*8)"); verl runs its 16-per-node DAPO NPU recipes on
# Atlas 200T A2 Box16 (verl v0.7.0 docs/ascend_tutorial/ascend_quick_start.rst).
PRODUCTS = {8: "Atlas 800T A2", 16: "Atlas 200T A2 Box16"}


def product_name(npus_per_node: int) -> str:
    return PRODUCTS.get(npus_per_node, f"a {npus_per_node}-NPU 910B host")


def node_names(count: int) -> list[str]:
    return [f"node{i}" for i in range(1, count + 1)]


def validate_faults(faults: list[Fault], nodes: list[str], npus_per_node: int) -> None:
    for fault in faults:
        if fault.node not in nodes:
            raise UsageError(f"fault {fault}: no node {fault.node!r} in this fleet ({', '.join(nodes)})")
        if fault.npu is not None and not 0 <= fault.npu < npus_per_node:
            raise UsageError(f"fault {fault}: NPU {fault.npu} does not exist (0..{npus_per_node - 1})")


@dataclass(frozen=True)
class HdkStart:
    """Driver / firmware a node starts with (None: not installed)."""

    driver: str | None
    firmware: str | None
    half_installed: bool = False


def hdk_start(node: str, faults: list[Fault], provisioned: bool, pinned_driver: str, pinned_firmware: str,
              firmware_driver: dict[str, str]) -> HdkStart:
    """What the node has installed before anyone touches it. firmware_driver maps a firmware to its HDK driver."""
    mine = {f.knob: f.value for f in faults if f.node == node and f.npu is None}
    driver = pinned_driver if provisioned else None
    firmware = pinned_firmware if provisioned else None
    if mine.get("hdk") == "out-of-range":
        driver, firmware = OUT_OF_RANGE_PAIR
    if "firmware" in mine:
        firmware = mine["firmware"]
        driver = firmware_driver.get(firmware, pinned_driver) if "driver" not in mine else driver
    if "driver" in mine:
        driver = mine["driver"]
    half = "driver-half-installed" in mine
    if half and driver is None:
        driver = pinned_driver
    return HdkStart(driver, firmware, half)


def installer_faults(name: str, faults: list[Fault]) -> dict[str, str]:
    return {"installer": f.value for f in faults if f.node == name and f.npu is None and f.knob == "installer"}


def build_node_model(name: str, index: int, npus_per_node: int, faults: list[Fault], *, chip_name: str,
                     hbm_mb: int, factory_firmware: str, mcu_version: str) -> dict:
    """The hardware model JSON the emulated tools read (driver/firmware state starts empty).

    Installer faults are not applied here: they concern the next install, so the fleet adds them with
    `installer_faults` after any preinstalled HDK is in place."""
    npus = []
    for k in range(npus_per_node):
        npus.append({
            "id": k,
            "present": True,
            "bus_id": f"0000:{BUS_PREFIXES[k % len(BUS_PREFIXES)]}:00.0" if k < len(BUS_PREFIXES)
            else f"0000:{0x90 + k:02X}:00.0",
            "serial": f"1025C9{index:02d}{k:04d}",
            "health": "OK",
            "temp_c": 38 + (k * 3) % 9,
            "power_w": round(95.0 + k * 0.7, 1),
            "hbm_used_mb": 3337 + k % 3,
            "aicore_pct": 0,
            "link": "UP",
            "net_health": "Success",
            "device_ip": f"10.88.{index}.{k + 11}",
            "netmask": "255.255.255.0",
            "netdetect": None,
            "gateway": None,
            "tls": 0,
        })
    model = {
        "hostname": name,
        "product": product_name(npus_per_node),
        "chip_name": chip_name,
        "hbm_mb": hbm_mb,
        "mcu_version": mcu_version,
        "npus": npus,
        "driver": {"loaded": None, "pending": None},
        "firmware": {"active": factory_firmware, "pending": None},
        "faults": {},
        "boot_id": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.boot0")),
        "boots": 0,
        "processes": [],
        "host_mem_gib": SIM_HOST_MEM_GIB,
        "disk_gib": SIM_DISK_GIB,
    }
    for fault in faults:
        if fault.node != name:
            continue
        if fault.npu is None:
            if fault.knob == "host-mem-gib":
                model["host_mem_gib"] = int(fault.value)
            elif fault.knob == "disk-gib":
                model["disk_gib"] = int(fault.value)
            elif fault.knob == "tls":
                for npu in npus:
                    npu["tls"] = 1 if fault.value == "on" else 0
            continue
        npu = npus[fault.npu]
        if fault.knob == "health":
            npu["health"] = fault.value
        elif fault.knob == "missing":
            npu["present"] = False
        elif fault.knob == "temp":
            npu["temp_c"] = int(fault.value)
            npu["temp_pinned"] = True
        elif fault.knob == "link":
            npu["link"] = fault.value
        elif fault.knob == "net_health":
            npu["net_health"] = fault.value
        elif fault.knob == "no-ip":
            npu["device_ip"] = None
            npu["netmask"] = None
        elif fault.knob == "hbm-used":
            npu["hbm_used_mb"] = int(fault.value)
        elif fault.knob == "roce":
            npu["roce"] = fault.value
    return model


def fabric_entry(model: dict) -> dict:
    """A node's NPU ports as the simulated RoCE fabric table lists them (fabric/<node>.json, shared by the
    fleet); the emulated hccn_tool keeps its own node's entry current (ascend_emu.py fabric_entry)."""
    return {"hostname": model["hostname"],
            "npus": [{"id": n["id"], "address": n.get("device_ip"), "netmask": n.get("netmask"),
                      "gateway": n.get("gateway"), "link": n["link"], "roce": n.get("roce") or "ok"}
                     for n in model["npus"] if n.get("present", True)]}


def meminfo(host_meminfo: str, total_gib: int) -> str:
    """The node's /proc/meminfo: the host's, with MemTotal set to `total_gib` and MemFree / MemAvailable moved by
    the same amount, so what the host has in use stays in use (Ray's memory monitor reads used = total - available;
    a node reporting 1.5 TiB with the host's few GiB available would look 99 % full to it). The file is written
    once, at `sim up`: its numbers do not follow what runs on the node."""
    values = {}
    for line in host_meminfo.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0])
    total_kib = total_gib << 20
    shift = total_kib - values.get("MemTotal", 0)
    out = []
    for line in host_meminfo.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemFree", "MemAvailable") and key in values:
            value = total_kib if key == "MemTotal" else min(total_kib, max(0, values[key] + shift))
            line = f"{key}:{value:>{max(len(rest) - 3, 1)}} kB"
        out.append(line)
    return "\n".join(out) + "\n"
