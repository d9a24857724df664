"""Findings from collected outputs: the emulated tools produce a host's outputs, analyze() judges them."""

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from dapo_ops.audit.analyze import analyze
from dapo_ops.audit.collect import HostRaw, read_bundle, write_bundle
from dapo_ops.audit.model import Thresholds
from dapo_ops.audit.report import prometheus_text
from dapo_ops.files import write_atomically
from dapo_ops.manifest import load_manifest
from dapo_ops.stackcheck import pinned_python_packages

SCHEMA = json.loads((Path(__file__).parents[2] / "dapo_ops" / "audit" / "schema.json").read_text())
NPUS = 4


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


BUNDLES = Path(__file__).parents[1] / "data" / "bundles"


def kv(info: dict, sep="=") -> str:
    return "".join(f"{k}{sep}{v}\n" for k, v in info.items())


def host_raw(name, variant="pinned", stack=None):
    """A host's collected outputs, as recorded from the emulated tools (tests/data/bundles/record.py names the
    hardware and versions of each variant), under the host name a test gives it."""
    [raw] = read_bundle(BUNDLES / variant)
    outputs = dict(raw.outputs)
    if stack is not None:
        outputs["python_stack"] = (0, json.dumps(stack))
    return dataclasses.replace(raw, host=name, outputs=outputs, source="ssh")


def codes(report, host):
    return sorted((f.code, f.npu, f.severity) for h in report.hosts if h.host == host for f in h.findings)


def test_clean_fleet_has_no_findings_and_matches_the_schema(tmp_path, manifest):
    report = analyze([host_raw("node1"), host_raw("node2")], manifest)
    assert report.findings == []
    document = report.to_dict()
    jsonschema.validate(document, SCHEMA)
    assert document["summary"] == {"hosts": 2, "reachable": 2, "errors": 0, "warnings": 0, "clean": True}
    assert document["hosts"]["node1"]["components"]["driver"] == manifest.artifact("driver").version


def with_tls(raw, states: dict[int, int]):
    """The host's recorded outputs with hccn_tool -tls -g answering `states` (device -> 0/1) in the documented
    layout (docs/ascend-formats.md §3.3)."""
    outputs = dict(raw.outputs)
    for device, on in states.items():
        outputs[f"tls.{device}"] = (0, f"dev_id:{device}, tls switch[{on}](0:disable, 1:enable), tls "
                                       "preconfigured[1](0:non-preset, 1:preset), tls alarm time threshold[60]days\n")
    return dataclasses.replace(raw, outputs=outputs)


def test_npu_tls_switches_that_differ_across_the_fleet_are_an_error_on_the_hosts_holding_the_fewer_state(manifest):
    npus = host_raw("node1").npus_expected                 # the recorded bundle's host has 4
    same = [with_tls(host_raw(name), dict.fromkeys(range(npus), 0)) for name in ("node1", "node2", "node3")]
    report = analyze(same, manifest)
    assert report.findings == [] and {row["tls"] for row in report.hosts[0].npus} == {"off"}
    jsonschema.validate(report.to_dict(), SCHEMA)
    mixed = same[:2] + [with_tls(host_raw("node3"), {**dict.fromkeys(range(npus), 0), 1: 1, 3: 1})]
    report = analyze(mixed, manifest)
    [finding] = report.errors
    assert (finding.host, finding.code, finding.expected, finding.actual) == ("node3", "npu-tls-mixed", "off", "on")
    assert finding.message.startswith("NPU NIC TLS is on on node3's NPUs 1, 3 but off on 10 of the 12 NPUs audited")
    halves = analyze([with_tls(host_raw("node1"), dict.fromkeys(range(npus), 1)),
                      with_tls(host_raw("node2"), dict.fromkeys(range(npus), 0))], manifest)
    assert sorted((f.host, f.actual) for f in halves.errors) == [("node1", "on"), ("node2", "off")]
    unread = analyze([host_raw("node1"), with_tls(host_raw("node2"), dict.fromkeys(range(npus), 1))], manifest)
    assert unread.findings == []                       # a host whose switches were not read is no evidence


def test_a_driver_outside_the_vendors_pairing_for_the_cann_is_noted_not_judged(manifest):
    """The pin is the seed's pair (HDK 25.0) although Huawei's installer pairs the pinned CANN with HDK 25.3
    (stack/manifest.yml vendor_hdk): the audit says so for each host, as information."""
    report = analyze([host_raw("node1")], manifest)
    assert report.findings == [] and report.to_dict()["summary"]["clean"]
    series, source = manifest.vendor_hdk()
    assert series == ("25.3",) and "CANN_8.3.RC1.json" in source
    [note] = [n for n in report.notes if n.code == "hdk-outside-vendor-pairing"]
    assert note.severity == "info" and note.host == "node1" and note.actual == manifest.artifact("driver").version
    assert note.message.startswith(f"driver {manifest.artifact('driver').version} is outside the HDK Huawei pairs "
                                   f"with CANN {manifest.artifact('cann_toolkit').version} (25.3.x: ascend-deployer")
    inside = dataclasses.replace(manifest, raw={**manifest.raw, "vendor_hdk": {"series": ["25.0"], "source": "x"}})
    assert not [n for n in analyze([host_raw("node1")], inside).notes if n.code == "hdk-outside-vendor-pairing"]


def test_each_fault_gives_its_finding_on_the_right_host_and_npu(tmp_path, manifest):
    raws = [
        host_raw("node1", "faults"),  # npu3 health Warning, npu1 missing, npu0 link DOWN, npu2 at 97 C
        host_raw("node2", "drv-24.1.rc3-fw-7.5.0.1.129"),
        host_raw("node3", "drv-24.1.rc2-fw-7.3.0.1.231"),
        HostRaw("node4", NPUS, unreachable="node4 (10.77.0.14): cannot connect: Connection refused"),
    ]
    report = analyze(raws, manifest)
    jsonschema.validate(report.to_dict(), SCHEMA)
    assert codes(report, "node1") == [("link-down", 0, "error"), ("npu-hot", 2, "warning"),
                                      ("npu-missing", 1, "error"), ("npu-unhealthy", 3, "error")]
    node2 = codes(report, "node2")
    assert ("driver-off-pin", None, "error") in node2 and ("firmware-off-pin", None, "error") in node2
    assert [c for c in node2 if c[0] == "npu-firmware-off-pin"] == [("npu-firmware-off-pin", n, "error") for n in range(NPUS)]
    assert not [c for c in node2 if c[0] == "incompatible"]
    node3 = codes(report, "node3")
    assert ("incompatible", None, "error") in node3
    assert [c for c in node3 if c[0] == "npu-incompatible"] == [("npu-incompatible", n, "error") for n in range(NPUS)]
    assert codes(report, "node4") == [("unreachable", None, "error")]
    message = next(f.message for f in report.findings if f.code == "incompatible")
    assert "7.3.0.1.231 is outside the driver 24.1.rc2's compatible_version_fw" in message


def test_off_pin_python_stack(tmp_path, manifest):
    stack = {"python": "3.11.2", "import_errors": {}, "torch_cxx11_abi": True, "atb_cxx_abi": "1",
             "packages": dict(pinned_python_packages(manifest), numpy="2.0.2")}
    report = analyze([host_raw("node1", stack=stack)], manifest)
    assert [(f.code, f.component) for f in report.findings] == [("stack-off-pin", "numpy")]


def live_stack_output(probe: dict, record: dict | None, env: str = "sourced") -> str:
    """What the python_stack fact prints on a node: the verify record, the environment line, the probe's JSON."""
    record_text = json.dumps(record) if record is not None else ""
    return (f"@@fact-file@@\n{record_text}\n\n@@env@@ {env} /usr/local/Ascend/dapo-ops-env.sh\n"
            f"{json.dumps(probe)}\n")


def live_probe(manifest, **versions):
    return {"python": "3.11.13", "imports": {}, "errors": {}, "torch_cxx11_abi": True, "atb_cxx_abi": "1",
            "versions": {**pinned_python_packages(manifest), "numpy": "1.26.4", **versions}}


def test_the_live_stack_decides_and_a_stale_verify_record_is_a_finding(manifest):
    """The record says pinned and clean; the env now has numpy 2 and another torch_npu: both are errors from the
    live answer, and the record's disagreement is a warning naming what it says."""
    record = {"python": "3.11.13", "import_errors": {},
              "packages": dict(pinned_python_packages(manifest), numpy="1.26.4")}
    probe = live_probe(manifest, numpy="2.2.6", torch_npu="2.7.1.post9")
    raw = host_raw("node1")
    raw.outputs["python_stack"] = (0, live_stack_output(probe, record))
    report = analyze([raw], manifest)
    assert sorted((f.code, f.component, f.severity) for f in report.findings) == [
        ("fact-file-stale", "fact file", "warning"), ("stack-off-pin", "numpy", "error"),
        ("stack-off-pin", "torch_npu", "error")]
    stale = next(f.message for f in report.findings if f.code == "fact-file-stale")
    assert "numpy 1.26.4 (live 2.2.6)" in stale and "(live 2.7.1.post9)" in stale
    assert report.hosts[0].components["numpy"] == "2.2.6"


def test_a_record_that_agrees_is_silent_and_a_missing_environment_script_is_an_error(manifest):
    probe = live_probe(manifest)
    record = {"packages": dict(probe["versions"]), "import_errors": {}}
    raw = host_raw("node1")
    raw.outputs["python_stack"] = (0, live_stack_output(probe, record))
    assert analyze([raw], manifest).findings == []
    raw.outputs["python_stack"] = (0, live_stack_output(dict(probe, errors={"torch_npu": "ImportError: libhccl.so"}),
                                                        record, env="missing"))
    found = {f.code: f for f in analyze([raw], manifest).findings}
    assert set(found) == {"cann-env-missing", "stack-off-pin", "fact-file-stale"}
    assert "/usr/local/Ascend/dapo-ops-env.sh is missing" in found["cann-env-missing"].message
    assert "imports clean (live failing)" in found["fact-file-stale"].message


def test_majority_drift_warns_the_host_that_differs_while_on_the_pin(tmp_path, manifest):
    raws = [host_raw(f"node{i}", "drv-24.1.rc3-fw-7.5.0.1.129") for i in (1, 2)]
    raws.append(host_raw("node3"))
    report = analyze(raws, manifest)
    drift = [(f.host, f.component) for f in report.findings if f.code == "differs-from-majority"]
    assert ("node3", "driver") in drift and ("node3", "firmware") in drift
    assert all(f.severity == "warning" for f in report.findings if f.code == "differs-from-majority")
    assert not [f for f in report.findings if f.host == "node3" and f.severity == "error"]


def test_pending_firmware_is_an_npu_finding(tmp_path, manifest):
    report = analyze([host_raw("node1", "pending-fw-7.5.0.1.129")], manifest)
    assert {f.code for f in report.findings} == {"npu-firmware-off-pin"}


def test_bundle_round_trip_and_malformed_file(tmp_path, manifest):
    raws = [host_raw("node1", "hot-npu2"),
            HostRaw("node2", NPUS, unreachable="timed out")]
    before = analyze(raws, manifest).to_dict()
    write_bundle(tmp_path / "bundle", raws)
    after = analyze(read_bundle(tmp_path / "bundle"), manifest).to_dict()
    assert after["findings"] == before["findings"]
    (tmp_path / "bundle" / "node1" / "board.3.txt").write_text("\tNPU ID : garbage\n")
    broken = analyze(read_bundle(tmp_path / "bundle"), manifest)
    failed = [f for f in broken.findings if f.code == "collect-failed"]
    assert len(failed) == 1 and failed[0].npu == 3 and "node1/board.3.txt" in failed[0].message


def test_prometheus_textfile(tmp_path, manifest):
    raws = [host_raw("node1", "alarm-npu1-hot-npu2"),
            HostRaw("node2", NPUS, unreachable="refused")]
    text = prometheus_text(analyze(raws, manifest), manifest, now=1700000000)
    assert 'dapo_audit_host_up{host="node2"} 0' in text
    assert 'dapo_npu_healthy{host="node1",npu="1"} 0' in text
    assert 'dapo_npu_healthy{host="node1",npu="0"} 1' in text
    assert 'dapo_npu_temperature_celsius{host="node1",npu="2"} 97' in text
    assert 'dapo_npu_firmware_match{host="node1",npu="0"} 1' in text
    assert 'dapo_audit_drift_findings{host="node1"} 1' in text
    target = tmp_path / "metrics" / "dapo.prom"
    write_atomically(target, text)
    assert target.read_text() == text and list(target.parent.iterdir()) == [target]


def test_thresholds(tmp_path, manifest):
    raws = [host_raw("node1", "warm-npu2-hbm-npu1")]
    assert {f.code for f in analyze(raws, manifest).findings} == {"hbm-in-use"}
    assert {f.code for f in analyze(raws, manifest, Thresholds(temp_c=75, hbm_used_mb=10000)).findings} == {"npu-hot"}


ASCEND = Path(__file__).parents[1] / "data" / "ascend"


def a3_raw(manifest, table="npu-smi-info-a3-healthy.txt", expected=16, link_down=(), name="a3node"):
    """An Atlas 800T A3 host's collected outputs: 8 NPUs x 2 chips, so 16 devices. Per-device facts (hccn_tool)
    answer for devices 0..15; the board answers for NPU ids 0..7 only (board.8.. name no NPU: npu-smi fails)."""
    outputs = {"npu_smi_info": (0, (ASCEND / table).read_text()),
               "driver_version": (0, (ASCEND / "driver-version.info").read_text()),
               "firmware_version": (0, (ASCEND / "firmware-version.info").read_text()),
               "toolkit_info": (0, kv(manifest.artifact("cann_toolkit").version_info)),
               "kernels_info": (0, kv(manifest.artifact("cann_kernels").version_info)),
               "nnal_info": (0, kv(manifest.artifact("cann_nnal").version_info, " : ")),
               "python_stack": (0, json.dumps({
                   "python": manifest.python_version + ".2", "import_errors": {}, "torch_cxx11_abi": True,
                   "atb_cxx_abi": "1", "packages": dict(pinned_python_packages(manifest), numpy="1.26.4")}))}
    board = (ASCEND / "npu-smi-board-a3.txt").read_text()
    board = board.replace("25.0.rc1.1", manifest.artifact("driver").version)
    board = board.replace("7.7.0.1.231", manifest.artifact("firmware").version)
    for index in range(expected):
        outputs[f"board.{index}"] = ((0, board.replace(": 0\n", f": {index}\n", 1)) if index < 8 else
                                     (255, "(test) no NPU with this id\n"))
        outputs[f"link.{index}"] = (0, f"link status: {'DOWN' if index in link_down else 'UP'}\n")
        outputs[f"net_health.{index}"] = (0, "net health status: Success\n")
        outputs[f"ip.{index}"] = (0, f"ipaddr:10.89.0.{index + 11}\nnetmask:255.255.255.0\n")
    return HostRaw(name, expected, outputs)


def test_a3_host_counts_16_devices_on_8_npus_and_is_clean(manifest):
    """dapo_npus_per_node counts devices (one per chip), as Ray and verl do: an A3 with 16 is clean, and
    the boards asked of device indexes 8..15 (no such NPU) are not findings."""
    report = analyze([a3_raw(manifest)], manifest)
    assert report.findings == []
    host = report.to_dict()["hosts"]["a3node"]
    jsonschema.validate(report.to_dict(), SCHEMA)
    assert [n["id"] for n in host["npus"]] == list(range(16))
    assert all(n["present"] and n["health"] == "OK" for n in host["npus"])
    # both chips of NPU 7 (devices 14, 15) carry NPU 7's board
    assert host["npus"][15]["firmware"] == manifest.artifact("firmware").version


def test_a3_warning_on_chip_1_of_npu_3_is_a_finding_naming_it(manifest):
    report = analyze([a3_raw(manifest, "npu-smi-info-a3-chip-warning.txt")], manifest)
    assert [(f.code, f.npu, f.severity, f.expected, f.actual) for f in report.findings] == [
        ("npu-unhealthy", 7, "error", "OK", "Warning")]
    assert report.findings[0].message == "NPU 3 chip 1 (device 7) health is Warning"
    assert 'dapo_npu_healthy{host="a3node",npu="7"} 0' in prometheus_text(report, manifest, now=1700000000)


def test_a3_busy_chips_missing_chip_nic_and_count(manifest):
    busy = analyze([a3_raw(manifest, "npu-smi-info-a3-processes.txt")], manifest)
    assert sorted((f.code, f.npu) for f in busy.findings) == [("hbm-in-use", 0), ("hbm-in-use", 3)]
    assert "NPU 1 chip 1 (device 3) already uses 41253 MB of HBM (processes running on it)" in [
        f.message for f in busy.findings]

    # the second chip of NPU 5 (device 11) vanished from npu-smi: a missing device, not a missing NPU
    text = (ASCEND / "npu-smi-info-a3-healthy.txt").read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(text) if line.startswith("| 1     11 "))
    raw = a3_raw(manifest)
    raw.outputs["npu_smi_info"] = (0, "".join(text[:at - 1] + text[at + 2:]))
    missing = analyze([raw], manifest)
    assert [(f.code, f.npu, f.expected, f.actual) for f in missing.findings] == [("npu-missing", 11, "16", "15")]
    assert missing.findings[0].message == "device 11 is missing (15 of 16 devices answer npu-smi)"

    # a device's NIC is judged at the device index and named by NPU and chip
    down = analyze([a3_raw(manifest, link_down=(9,))], manifest)
    assert [(f.code, f.npu, f.message) for f in down.findings] == [
        ("link-down", 9, "NPU 4 chip 1 (device 9) NIC link is DOWN")]

    # an inventory that counts A3 cards (8) instead of devices (16) is told so
    cards = analyze([a3_raw(manifest, expected=8)], manifest)
    assert [(f.code, f.severity, f.expected, f.actual) for f in cards.findings] == [
        ("npu-count-mismatch", "warning", "8", "16")]
    assert "16 devices (8 NPUs x 2 chips)" in cards.findings[0].message
    # a bundle that does not say how many devices it expects (0) is not told it has too many
    assert analyze([a3_raw(manifest, expected=0)], manifest).findings == []


def test_a3_board_off_pin_is_one_finding_per_npu(manifest):
    raw = a3_raw(manifest)
    rc, text = raw.outputs["board.2"]
    raw.outputs["board.2"] = (rc, text.replace(manifest.artifact("firmware").version, "7.5.0.1.129"))
    report = analyze([raw], manifest)
    assert [(f.code, f.npu) for f in report.findings] == [("npu-firmware-off-pin", 4)]
    assert report.findings[0].message.startswith("NPU 2 (devices 4, 5) runs firmware 7.5.0.1.129")
