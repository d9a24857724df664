#!/usr/bin/python3
"""Emulated Ascend node tools for the dapo-ops simulated fleet (multi-call: the name it is run as decides).

    npu-smi      info | info -l | info -m | info -t board|health|temp|power|usages|common -i N [-c C] |
                 upgrade -b mcu -i N
    hccn_tool    -i N -link|-ip|-net_health|-netdetect|-gateway|-tls -g | -i N -ip -s address A netmask M |
                 -i N -tls -s enable 0|1 | -i N -gateway -s gateway G | -i N -netdetect -s address A | -i N -ping -g address A
    lspci        [-n|-nn] [-d VENDOR:DEVICE]
    upgrade-tool --device_index -1 --component -1 --version
    sim-reboot   activate pending driver/firmware, new boot id (the Ansible reboot module's reboot_command)

Driven by the node's hardware model (/dev/.dapo-sim/hw.json) and the installed version files. The output copies
published samples of the real tools: `npu-smi info` from an 8x910B3 host's dump (vllm-project/vllm-ascend#198) and
public 910B setup guides; hccn_tool and lspci from public samples and the MindCluster docs (docs/ascend-formats.md
§3). Not a vendor tool; stdlib only, runs on the node's python3.
"""

import json
import math
import os
import sys
import time

HW_DIR = os.environ.get("DAPO_SIM_HW_DIR", "/dev/.dapo-sim")
ASCEND = os.environ.get("DAPO_SIM_ASCEND", "/usr/local/Ascend")
HCCN_CONF = os.environ.get("DAPO_SIM_HCCN_CONF", "/etc/hccn.conf")
FABRIC_DIR = os.environ.get("DAPO_SIM_FABRIC_DIR", os.path.join(HW_DIR, "fabric"))
KV = "\t%-30s : %s"


def load_hw():
    with open(os.path.join(HW_DIR, "hw.json")) as f:
        hw = json.load(f)
    hw["_markers"] = load_markers()
    return hw


def save_hw(hw):
    hw = {k: v for k, v in hw.items() if not k.startswith("_")}
    path = os.path.join(HW_DIR, "hw.json")
    tmp = path + ".%d.tmp" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(hw, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def present(hw):
    return [n for n in hw["npus"] if n.get("present", True)]


# How a loaded NPU's readings move (not measured on a 910B: shaped so a step shows, within a minute, in AICore %,
# temperature and power): each AICore percent adds RISE_C degrees at equilibrium, reached with time constant TAU_S,
# and WATT_PER_PCT watts at once.
RISE_C, TAU_S, WATT_PER_PCT = 0.3, 15.0, 2.6
RATED_MHZ, THROTTLED_MHZ, THROTTLE_C = 1800, 1300, 105


def load_markers():
    """What runs on the node's NPUs: every JSON file in HW_DIR/load, written by the stand-in job's workers
    ({"since": epoch, "until": epoch, "aicore_pct": N, "hbm_fraction": F, "npus": [ids] or absent for all})."""
    directory = os.path.join(HW_DIR, "load")
    markers = []
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name)) as f:
                marker = json.load(f)
            markers.append({"since": float(marker["since"]), "until": float(marker["until"]),
                            "aicore_pct": int(marker["aicore_pct"]), "npus": marker.get("npus"),
                            "hbm_fraction": float(marker.get("hbm_fraction", 0))})
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a marker being written, or not one
    return markers


def live(npu, hw, now=None):
    """The NPU's readings now: its idle model, moved by the load markers that name it. A pinned temperature (the
    `temp` fault knob) stays as set."""
    now = time.time() if now is None else now
    npu = dict(npu)
    mine = [m for m in hw.get("_markers", []) if m["npus"] is None or npu["id"] in m["npus"]]
    busy = [m for m in mine if m["since"] <= now <= m["until"]]
    pct = max((m["aicore_pct"] for m in busy), default=0)
    if pct:
        pct = max(1, min(100, pct - (npu["id"] * 3) % 7 + (int(now) * 7 + npu["id"] * 13) % 11 - 5))
        share = max(m["hbm_fraction"] for m in busy)
        npu["hbm_used_mb"] = max(npu["hbm_used_mb"], int(hw["hbm_mb"] * share))
    rise = 0.0
    for m in mine:   # each load period heats while it lasts and cools after
        if m["since"] > now:
            continue
        heated = RISE_C * m["aicore_pct"] * (1 - math.exp(-(min(now, m["until"]) - m["since"]) / TAU_S))
        rise = max(rise, heated * math.exp(-max(0.0, now - m["until"]) / TAU_S))
    npu["aicore_pct"] = pct
    if not npu.get("temp_pinned"):
        npu["temp_c"] = int(round(npu["temp_c"] + rise))
    npu["power_w"] = round(npu["power_w"] + WATT_PER_PCT * pct, 1)
    return npu


def find_npu(hw, npu_id):
    for npu in present(hw):
        if npu["id"] == npu_id:
            return npu
    return None


def read_kv(path):
    try:
        with open(path) as f:
            return dict(line.strip().split("=", 1) for line in f if "=" in line)
    except OSError:
        return None


# ------------------------------------------------------------------------------------------------------ npu-smi

SEP = "+---------------------------+---------------+----------------------------------------------------+"
SEP_EQ = "+===========================+===============+====================================================+"


def row(a, b, c):
    return "|%s|%s|%s|" % (a.ljust(27), b.ljust(15), c.ljust(52))


def usage_pair(used, total):
    return "%-5s/ %s" % (used, total)


def driver_loaded_or_die(hw):
    loaded = hw["driver"].get("loaded")
    if not loaded:
        print("dcmi module initialize failed. ret is -8005")
        sys.exit(255)
    return loaded


def firmware_compatible(hw):
    driver = read_kv(os.path.join(ASCEND, "driver", "version.info")) or {}
    ranges = driver.get("compatible_version_fw", "")
    fw = hw["firmware"].get("active") or ""

    def nums(v):
        out = []
        for t in v.split("."):
            if not t.isdigit():
                break
            out.append(int(t))
        return tuple(out)

    value = nums(fw)
    for part in ranges.replace("],[", "]|[").split("|"):
        part = part.strip().strip("[]")
        if "," not in part:
            continue
        low, high = (nums(x) for x in part.split(",", 1))
        if value[: len(low)] >= low and value[: len(high)] <= high:
            return "OK"
    return "NOK"


def npu_smi_table(hw):
    version = driver_loaded_or_die(hw)
    out = ["+" + "-" * 96 + "+"]
    out.append("| %s|" % ("npu-smi %-25sVersion: %s" % (version, version)).ljust(95))
    out.append(SEP)
    out.append(row(" NPU   Name", " Health", " Power(W)    Temp(C)           Hugepages-Usage(page)"))
    out.append(row(" Chip", " Bus-Id", " AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)"))
    out.append(SEP_EQ)
    now = time.time()
    for npu in (live(n, hw, now) for n in present(hw)):
        first = " %-12s%-18s%s" % ("%.1f" % npu["power_w"], npu["temp_c"], usage_pair(0, 0))
        second = " %-12s%-18s%s" % (npu["aicore_pct"], usage_pair(0, 0), usage_pair(npu["hbm_used_mb"], hw["hbm_mb"]))
        out.append(row(" %-6s%s" % (npu["id"], hw["chip_name"]), " " + npu["health"], first))
        out.append(row(" 0", " " + npu["bus_id"], second))
        out.append(SEP_EQ)
    out.append(SEP)
    out.append(row(" NPU     Chip", " Process id", " Process name             | Process memory(MB)"))
    out.append(SEP_EQ)
    for npu in present(hw):
        procs = [p for p in hw.get("processes", []) if p["npu"] == npu["id"]]
        if not procs:
            out.append("| %s|" % ("No running processes found in NPU %d" % npu["id"]).ljust(95))
        for p in procs:
            out.append("|%s|%s|%s|%s|" % ((" %-8s%s" % (npu["id"], 0)).ljust(27), (" %s" % p["pid"]).ljust(15),
                                           (" " + p.get("name", "")).ljust(26), (" %s" % p["memory_mb"]).ljust(25)))
        out.append(SEP_EQ)
    return "\n".join(out)


def npu_smi_list(hw):
    driver_loaded_or_die(hw)
    lines = [KV % ("Total Count", len(present(hw))), ""]
    for npu in present(hw):
        lines += [KV % ("NPU ID", npu["id"]), KV % ("Chip Count", 1), ""]
    return "\n".join(lines)


def npu_smi_map(hw):
    driver_loaded_or_die(hw)
    lines = ["\t%-31s%-31s%-31s%s" % ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name")]
    for logic, npu in enumerate(present(hw)):
        lines.append("\t%-31s%-31s%-31s%s" % (npu["id"], 0, logic, "Ascend " + hw["chip_name"]))
        lines.append("\t%-31s%-31s%-31s%s" % (npu["id"], 1, "-", "Mcu"))
    return "\n".join(lines)


ERROR_CODES = {"OK": "NA", "Warning": "0x80CD8008", "Alarm": "0x80E18402", "Critical": "0x80E3A201", "UNKNOWN": "NA"}


def npu_smi_type(hw, kind, npu_id, chip):
    driver_loaded_or_die(hw)
    npu = find_npu(hw, npu_id)
    if npu is None:
        print("The NPU ID %d is invalid." % npu_id)
        sys.exit(1)
    npu = live(npu, hw)
    if kind == "board":
        lines = [KV % ("NPU ID", npu_id)]
        if chip is None:
            lines += [
                KV % ("Product Name", "IT21HMDC_Bin5"), KV % ("Model", "NA"), KV % ("Manufacturer", "Huawei"),
                KV % ("Serial Number", npu["serial"]), KV % ("Software Version", hw["driver"]["loaded"]),
                KV % ("Firmware Version", hw["firmware"].get("active") or "NA"),
                KV % ("Compatibility", firmware_compatible(hw)), KV % ("Board ID", "0x60"), KV % ("PCB ID", "A"),
                KV % ("BOM ID", "1"), KV % ("PCIe Bus Info", npu["bus_id"]), KV % ("Slot ID", npu_id),
                KV % ("Class ID", "NA"), KV % ("PCI Vendor ID", "0x19E5"), KV % ("PCI Device ID", "0xD802"),
                KV % ("Subsystem Vendor ID", "0x19E5"), KV % ("Subsystem Device ID", "0x3003"),
                KV % ("Chip Count", 1)]
        else:
            lines += [KV % ("Chip ID", chip), KV % ("Chip Type", "Ascend"), KV % ("Chip Name", hw["chip_name"]),
                      KV % ("Chip Version", "V1"), KV % ("Board ID", "0x60"), KV % ("PCB ID", "A"),
                      KV % ("BOM ID", "1"), KV % ("PCIe Bus Info", npu["bus_id"]),
                      KV % ("Firmware Version", hw["firmware"].get("active") or "NA")]
        return "\n".join(lines)
    if kind == "health":
        if chip is not None:
            return "\n".join([KV % ("Health Status", npu["health"]),
                              KV % ("Error Code", ERROR_CODES.get(npu["health"], "NA")),
                              KV % ("Error Information", "NA" if npu["health"] == "OK" else "Sensor abnormal")])
        return "\n".join([KV % ("NPU ID", npu_id), KV % ("Chip Count", 1), "", KV % ("Chip ID", 0),
                          KV % ("Health", npu["health"]), "", KV % ("Health", "OK"), KV % ("Chip Name", "MCU")])
    if kind == "temp":
        return "\n".join([KV % ("NPU ID", npu_id), KV % ("Chip Count", 1), "",
                          KV % ("NPU Temperature (C)", npu["temp_c"]), KV % ("Chip ID", 0), "",
                          KV % ("LM75A_TE (C)", max(npu["temp_c"] - 4, 20)),
                          KV % ("LM75B_TE (C)", max(npu["temp_c"] - 4, 20)), KV % ("Chip Name", "MCU")])
    if kind == "power":
        return "\n".join([KV % ("NPU Real-time Power(W)", "%.1f" % npu["power_w"]), KV % ("Chip ID", 0)])
    if kind == "common":
        # the keys of the open CANN driver's npucli print_common_info; rated 1800 MHz, 800 idle (public 910B
        # samples); under load the rated frequency, reduced from THROTTLE_C (MindCluster FaultDiag's number)
        current = 800 if not npu["aicore_pct"] else RATED_MHZ if npu["temp_c"] < THROTTLE_C else THROTTLED_MHZ
        return "\n".join([
            KV % ("NPU ID", npu_id), KV % ("Chip Count", 1), "",
            KV % ("Memory Usage Rate(%)", 0), KV % ("HBM Usage Rate(%)", npu["hbm_used_mb"] * 100 // hw["hbm_mb"]),
            KV % ("Aicore Usage Rate(%)", npu["aicore_pct"]), KV % ("Aicore Freq(MHZ)", RATED_MHZ),
            KV % ("Aicore curFreq(MHZ)", current), KV % ("Aicore Count", 20), KV % ("Temperature(C)", npu["temp_c"]),
            KV % ("NPU Real-time Power(W)", "%.1f" % npu["power_w"]), KV % ("Chip ID", 0), "",
            KV % ("Chip Name", "mcu"), KV % ("Temperature(C)", max(npu["temp_c"] - 8, 20))])
    if kind == "usages":
        rate = npu["hbm_used_mb"] * 100 // hw["hbm_mb"]
        return "\n".join([
            KV % ("DDR Capacity(MB)", 0), KV % ("DDR Usage Rate(%)", 0), KV % ("DDR Hugepages Total(page)", 0),
            KV % ("DDR Hugepages Usage Rate(%)", 0), KV % ("HBM Capacity(MB)", hw["hbm_mb"]),
            KV % ("HBM Usage Rate(%)", rate), KV % ("Aicore Usage Rate(%)", npu["aicore_pct"]),
            KV % ("Aivector Usage Rate(%)", 0), KV % ("Aicpu Usage Rate(%)", 0), KV % ("Ctrlcpu Usage Rate(%)", 6),
            KV % ("DDR Bandwidth Usage Rate(%)", 0), KV % ("HBM Bandwidth Usage Rate(%)", 0),
            KV % ("NPU Utilization(%)", npu["aicore_pct"]), KV % ("Aicube Usage Rate(%)", 0), KV % ("Chip ID", 0)])
    print("Parameter error: unknown type %s" % kind)
    sys.exit(1)


def option(args, flag, cast=str):
    if flag not in args:
        return None
    i = args.index(flag)
    if i + 1 >= len(args):
        usage_error("option %s needs a value" % flag)
    try:
        return cast(args[i + 1])
    except ValueError:
        usage_error("invalid value for %s: %s" % (flag, args[i + 1]))


def usage_error(message):
    print("Parameter error: %s" % message)
    sys.exit(1)


def npu_smi(args):
    hw = load_hw()
    if args[:1] == ["info"]:
        rest = args[1:]
        if not rest:
            return npu_smi_table(hw)
        if rest == ["-l"]:
            return npu_smi_list(hw)
        if rest == ["-m"]:
            return npu_smi_map(hw)
        kind = option(rest, "-t")
        npu_id = option(rest, "-i", int)
        if kind and npu_id is not None:
            return npu_smi_type(hw, kind, npu_id, option(rest, "-c", int))
    if args[:1] == ["upgrade"] and option(args, "-b") == "mcu":
        driver_loaded_or_die(hw)
        if find_npu(hw, option(args, "-i", int)) is None:
            usage_error("invalid NPU ID")
        return "\t%-30s : %s" % ("Version", hw.get("mcu_version", "23.3.13"))
    usage_error("usage: npu-smi info [-l | -m | -t TYPE -i ID [-c CHIP]]")


# ---------------------------------------------------------------------------------------------------- hccn_tool


def write_hccn_conf(hw):
    # The keys and their order follow /etc/hccn.conf as the real hccn_tool writes it (docs/ascend-formats.md §3.3).
    lines = []
    for npu in present(hw):
        i = npu["id"]
        if npu.get("device_ip"):
            lines += ["address_%d=%s" % (i, npu["device_ip"]), "netmask_%d=%s" % (i, npu.get("netmask") or "")]
        if npu.get("netdetect"):
            lines.append("netdetect_%d=%s" % (i, npu["netdetect"]))
        if npu.get("gateway"):
            lines.append("gateway_%d=%s" % (i, npu["gateway"]))
        if npu.get("device_ip"):
            lines += ["send_arp_status_%d=1" % i, "tls_enable_%d=%d" % (i, npu.get("tls", 0))]
    tmp = HCCN_CONF + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))
    os.replace(tmp, HCCN_CONF)


# The RoCE fabric between the simulated nodes: every node publishes its NPU ports (address, netmask, gateway,
# link, the roce fault knob) as FABRIC_DIR/<hostname>.json, a directory the fleet shares with all its nodes.
# `sim up` writes each node's first entry (dapo_sim.hwmodel.fabric_entry, which this mirrors); a node
# rewrites its own entry whenever its hccn settings change, and -ping reads the others' entries.


def fabric_entry(hw):
    return {"hostname": hw["hostname"],
            "npus": [{"id": n["id"], "address": n.get("device_ip"), "netmask": n.get("netmask"),
                      "gateway": n.get("gateway"), "link": n["link"], "roce": n.get("roce") or "ok"}
                     for n in present(hw)]}


def write_fabric(hw):
    if not os.path.isdir(FABRIC_DIR):
        return
    path = os.path.join(FABRIC_DIR, hw["hostname"] + ".json")
    tmp = path + ".%d.tmp" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(fabric_entry(hw), f, sort_keys=True)
    os.replace(tmp, path)


def fabric_ports(hw):
    """Every NPU port of the fleet: this node's from its own model, the other nodes' from their entries."""
    ports = [dict(p, hostname=hw["hostname"]) for p in fabric_entry(hw)["npus"]]
    try:
        names = sorted(os.listdir(FABRIC_DIR))
    except OSError:
        names = []
    for name in names:
        if not name.endswith(".json") or name == hw["hostname"] + ".json":
            continue
        try:
            with open(os.path.join(FABRIC_DIR, name)) as f:
                entry = json.load(f)
        except (OSError, ValueError):
            continue
        ports += [dict(p, hostname=entry.get("hostname")) for p in entry.get("npus", [])]
    return ports


def ip_int(address):
    parts = [int(x) for x in address.split(".")]
    if len(parts) != 4 or not all(0 <= x <= 255 for x in parts):
        raise ValueError(address)
    return (parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]


def routable(src, src_mask, gateway, dst):
    """src can send to dst: the same subnet, or a gateway inside src's subnet."""
    try:
        mask = ip_int(src_mask)
        if ip_int(src) & mask == ip_int(dst) & mask:
            return True
        return bool(gateway) and ip_int(gateway) & mask == ip_int(src) & mask
    except (ValueError, AttributeError):
        return False


def ping_reaches(local, target, ports):
    """The RoCE ping from NPU port `local` to `target` is answered: both ports are UP and addressed, neither is cut
    off (the roce=unreachable knob), `target` is an NPU port of the fleet, and each side can route to the other."""
    if local["link"] != "UP" or not local.get("address") or local.get("roce", "ok") != "ok":
        return False
    peer = next((p for p in ports if p.get("address") == target), None)
    if peer is None or peer["link"] != "UP" or peer.get("roce", "ok") != "ok":
        return False
    if peer.get("hostname") == local.get("hostname") and peer["id"] == local["id"]:
        return True
    return (routable(local["address"], local.get("netmask"), local.get("gateway"), target) and
            routable(target, peer.get("netmask"), peer.get("gateway"), local["address"]))


def save_hccn(hw):
    save_hw(hw)
    write_hccn_conf(hw)
    write_fabric(hw)


def hccn_tool(args):
    hw = load_hw()
    driver_loaded_or_die(hw)
    npu_id = option(args, "-i", int)
    if npu_id is None:
        usage_error("hccn_tool -i <device_id> -<command> -g|-s ...")
    npu = find_npu(hw, npu_id)
    if npu is None:
        print("device id %d is invalid" % npu_id)
        sys.exit(1)
    getting = "-g" in args
    setting = "-s" in args
    if "-link" in args and getting:
        return "link status: %s" % npu["link"]
    if "-net_health" in args and getting:
        return "net health status: %s" % npu["net_health"]
    if "-ip" in args and getting:
        if not npu.get("device_ip"):
            print("Get ipconf failed, because no ip was preset there!")
            sys.exit(1)
        return "ipaddr:%s\nnetmask:%s" % (npu["device_ip"], npu["netmask"])
    if "-ip" in args and setting:
        address, netmask = option(args, "address"), option(args, "netmask")
        if not address or not netmask:
            usage_error("-ip -s address <ip> netmask <mask>")
        npu["device_ip"], npu["netmask"] = address, netmask
        save_hccn(hw)
        return ""
    if "-netdetect" in args:
        # -netdetect -s address A (Huawei MindCluster toolbox guide, "Using hccn_tool to Configure the IP Address
        # and Subnet Mask of the RoCE NIC"); read back as 'netdetect address: A'.
        if setting:
            address = option(args, "address")
            if not address:
                usage_error("-netdetect -s address <ip>")
            npu["netdetect"] = address
            save_hccn(hw)
            return ""
        return "netdetect address: %s" % (npu.get("netdetect") or "")
    if "-gateway" in args:
        # -gateway -s gateway G (docs/ascend-formats.md §3.3); read back as 'default gateway:G, Iface:ethN'.
        if setting:
            gateway = option(args, "gateway")
            if not gateway:
                usage_error("-gateway -s gateway <ip>")
            npu["gateway"] = gateway
            save_hccn(hw)
            return ""
        return "default gateway:%s, Iface:eth%d" % (npu.get("gateway") or "", npu_id)
    if "-tls" in args:
        # -tls -g / -tls -s enable 0|1; the readback line as the public sample prints it (docs/ascend-formats.md
        # §3.3: Ascend/mind-cluster docs/en/faultdiag/user_guide/03_collecting_logs.md)
        if setting:
            value = option(args, "enable")
            if value not in ("0", "1"):
                usage_error("-tls -s enable <0|1>")
            npu["tls"] = int(value)
            save_hccn(hw)
            return ""
        return ("dev_id:%d, tls switch[%d](0:disable, 1:enable), tls preconfigured[1](0:non-preset, 1:preset), "
                "tls alarm time threshold[60]days" % (npu_id, npu.get("tls", 0)))
    if "-ping" in args and getting:
        # Output as the real tool prints it: docs/ascend-formats.md §3.3 for the answered ping; an unanswered probe prints
        # 'recv time out seq=K' and the summary counts it (Huawei MindIE multi-node guide; MindCluster's
        # troubleshooting guide: '3 packets transmitted, 0 received, 100.00% packet loss' = broken RoCE network).
        target = option(args, "address")
        if not target:
            usage_error("-ping -g address <ip>")
        local = dict(fabric_entry(hw)["npus"][present(hw).index(npu)], hostname=hw["hostname"])
        ok = ping_reaches(local, target, fabric_ports(hw))
        lines = ["device %d PING %s" % (npu_id, target)]
        lines += [("recv seq=%d,time=0.%03d000ms" % (s, 48 + 7 * s)) if ok else ("recv time out seq=%d" % s)
                  for s in range(3)]
        lines.append("3 packets transmitted, %d received, %s packet loss" % ((3, "0.00%") if ok else (0, "100.00%")))
        return "\n".join(lines)
    usage_error("unsupported hccn_tool command: %s" % " ".join(args))


# -------------------------------------------------------------------------------------------------------- lspci


def lspci(args):
    hw = load_hw()
    numeric = "-n" in args or "-nn" in args
    both = "-nn" in args
    wanted = option(args, "-d")
    out = ["00:00.0 Host bridge: Huawei Technologies Co., Ltd. HiSilicon PCIe Root Port with Gen4 (rev 21)"
           if not numeric else "00:00.0 0604: 19e5:a120 (rev 21)"]
    for npu in present(hw):
        slot = npu["bus_id"][5:].lower()
        if both:
            out.append("%s Processing accelerators [1200]: Huawei Technologies Co., Ltd. Device [19e5:d802] (rev 20)" % slot)
        elif numeric:
            out.append("%s 1200: 19e5:d802 (rev 20)" % slot)
        else:
            out.append("%s Processing accelerators: Huawei Technologies Co., Ltd. Device d802 (rev 20)" % slot)
    if wanted:
        vendor, _, device = wanted.partition(":")
        if (vendor.lower(), device.lower()) == ("19e5", "d802"):
            out = out[1:]
        else:
            out = []
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------- upgrade-tool


def upgrade_tool(args):
    hw = load_hw()
    driver_loaded_or_die(hw)
    if "--version" not in args:
        usage_error("upgrade-tool --device_index -1 --component -1 --version")
    lines = []
    for npu in present(hw):
        version = hw["firmware"].get("active") or "NA"
        lines.append("Get component version(%s) succeed for deviceId(%d), componentType(0)." % (version, npu["id"]))
        lines.append('{"device_id":%d, "component":nve, "version":%s}' % (npu["id"], version))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------- sim-reboot


def sim_reboot(args):
    """Emulated reboot: the installed driver is loaded, pending firmware becomes active, the boot id changes."""
    hw = load_hw()
    installed = read_kv(os.path.join(ASCEND, "driver", "version.info"))
    hw["driver"]["loaded"] = installed.get("Version") if installed else None
    hw["driver"]["pending"] = None
    if hw["firmware"].get("pending"):
        hw["firmware"]["active"] = hw["firmware"]["pending"]
        hw["firmware"]["pending"] = None
    import time
    import uuid

    hw["boot_id"] = str(uuid.uuid4())
    hw["boots"] = hw.get("boots", 0) + 1
    hw["booted_at"] = time.time()
    hw["processes"] = []
    save_hw(hw)
    with open(os.path.join(HW_DIR, "boot_id.tmp"), "w") as f:
        f.write(hw["boot_id"] + "\n")
    os.replace(os.path.join(HW_DIR, "boot_id.tmp"), os.path.join(HW_DIR, "boot_id"))
    return ""


def dkms(args):
    """DKMS stand-in of the node image: the driver's kernel modules are never really built here."""
    if args[:1] in (["--version"], ["-V"]):
        return "dkms-3.0.10"
    if args[:1] == ["status"]:
        return "davinci_ascend/1.0, %s, %s: installed" % (os.uname().release, os.uname().machine) if \
            os.path.exists(os.path.join(ASCEND, "driver", "version.info")) else ""
    usage_error("dkms stand-in supports --version and status")


TOOLS = {"dkms": dkms, "npu-smi": npu_smi, "hccn_tool": hccn_tool, "lspci": lspci, "upgrade-tool": upgrade_tool,
         "sim-reboot": sim_reboot}


def main(argv):
    name = os.path.basename(argv[0])
    if name in ("ascend_emu.py", "ascend-emu") and len(argv) > 1:
        name, argv = argv[1], argv[1:]
    tool = TOOLS.get(name)
    if tool is None:
        print("ascend-emu: unknown tool %r" % name, file=sys.stderr)
        return 127
    try:
        output = tool(argv[1:])
    except (OSError, ValueError, KeyError) as exc:
        print("%s: hardware model unavailable: %s" % (name, exc), file=sys.stderr)
        return 1
    if output:
        print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
