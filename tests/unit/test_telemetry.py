"""top's pure parts: samples from real npu-smi tables, the alerts, npu-exporter's exposition, the run's record."""

import json
import re
import time

import pytest

from dapo_ops.ascend.npu_smi import parse_npu_smi_info
from dapo_ops.telemetry import recording
from dapo_ops.telemetry.alerts import ERROR, INFO, WARNING, Thresholds, alerts
from dapo_ops.telemetry.exporter import exposition
from dapo_ops.telemetry.model import FleetSample, NodeSample, NpuReading, readings_from
from dapo_ops.telemetry.series import Window
from dapo_ops.telemetry.view import document


def reading(device, aicore=80, temp=50, hbm=30000, health="OK", total=65536):
    return NpuReading(npu=device, chip=0, device=device, name="910B3", health=health, aicore_pct=aicore,
                      hbm_used_mb=hbm, hbm_total_mb=total, temp_c=temp, power_w=300.5, bus_id=f"0000:C{device}:00.0")


def node(name, readings, expected=None, error=None):
    return NodeSample(name, 100.0, tuple(readings), error=error, expected=expected)


def codes(found):
    return [(a.severity, a.code, a.node, a.npu) for a in found]


def test_readings_come_from_a_real_910b_table_with_a3_devices_by_phy_id(data_dir):
    info = parse_npu_smi_info((data_dir / "ascend" / "npu-smi-info-8npu-processes.txt").read_text())
    first = readings_from(info)[0]
    assert (first.device, first.temp_c, first.hbm_used_mb, first.hbm_total_mb) == (0, 55, 60478, 65536)
    a3 = readings_from(parse_npu_smi_info((data_dir / "ascend" / "npu-smi-info-a3-healthy.txt").read_text()))
    assert len({r.device for r in a3}) == len(a3) > len({r.npu for r in a3})   # two chips per NPU, one device each


def test_a_quiet_healthy_fleet_raises_nothing():
    sample = FleetSample(100.0, (node("n1", [reading(k, aicore=0, temp=40) for k in range(8)], expected=8),))
    assert alerts([sample]) == []


@pytest.mark.parametrize("temp, expected", [(94, []), (95, [(WARNING, "npu-hot", "n2", 3)]),
                                            (104, [(WARNING, "npu-hot", "n2", 3)]),
                                            (105, [(ERROR, "npu-throttling", "n2", 3)])])
def test_temperature_near_and_at_the_throttle_point(temp, expected):
    sample = FleetSample(100.0, (node("n1", [reading(k) for k in range(4)]),
                                 node("n2", [reading(k, temp=temp if k == 3 else 50) for k in range(4)])))
    assert codes(alerts([sample])) == expected


def test_missing_unhealthy_full_and_unsampled_nodes_are_named():
    sample = FleetSample(100.0, (
        node("n1", [reading(0), reading(1, health="Critical"), reading(3, hbm=64000), reading(4, health="Warning")],
             expected=5),
        node("n2", [], error="unreachable: timed out")))
    assert codes(alerts([sample])) == [
        (ERROR, "npu-unhealthy", "n1", 1), (ERROR, "npu-missing", "n1", 2), (ERROR, "no-sample", "n2", None),
        (WARNING, "hbm-full", "n1", 3), (WARNING, "npu-unhealthy", "n1", 4)]


def test_a_node_far_below_the_others_during_a_step_lags_and_idle_nodes_do_not():
    busy = [node(f"n{i}", [reading(k, aicore=85) for k in range(8)]) for i in range(3)]
    slow = node("n3", [reading(k, aicore=20) for k in range(8)])
    found = alerts([FleetSample(100.0, (*busy, slow))])
    assert codes(found) == [(WARNING, "node-lagging", "n3", None)]
    assert "its NICs" in found[0].check
    idle = [node(f"n{i}", [reading(k, aicore=0 if i else 5) for k in range(8)]) for i in range(4)]
    assert alerts([FleetSample(100.0, tuple(idle))]) == []


def test_utilisation_is_judged_over_the_window_and_a_low_fleet_suggests_the_micro_batch():
    window = Window(seconds=60)
    window.add((node("n1", [reading(k, aicore=65) for k in range(8)]),
                node("n2", [reading(k, aicore=0) for k in range(8)])), at=100.0)
    judged = window.add((node("n1", [reading(k, aicore=65) for k in range(8)]),
                         node("n2", [reading(k, aicore=50) for k in range(8)])), at=110.0)
    # over the window n2 averages 25 %, under half of n1's 65 %; both are below 70 %
    assert codes(judged.alerts) == [(WARNING, "node-lagging", "n2", None), (INFO, "low-utilisation", "fleet", None)]
    later = window.add(judged.nodes, at=200.0)   # the first two samples left the window
    assert codes(later.alerts) == [(INFO, "low-utilisation", "fleet", None)]
    assert "65 % to 89 %" in later.alerts[0].check


def test_the_json_document_has_every_npu_and_the_alerts():
    sample = Window(thresholds=Thresholds(throttle_c=105)).add(
        (node("n1", [reading(k) for k in range(2)], expected=2), node("n2", [reading(0, temp=97)], expected=1)),
        at=100.0)
    doc = json.loads(json.dumps(document(sample)))
    assert doc["npus"] == 3 and [n["node"] for n in doc["nodes"]] == ["n1", "n2"]
    assert doc["nodes"][1]["npus"][0] | {"bus_id": None} == {
        "npu": 0, "chip": 0, "device": 0, "name": "910B3", "health": "OK", "aicore_pct": 80, "hbm_used_mb": 30000,
        "hbm_total_mb": 65536, "temp_c": 97, "power_w": 300.5, "bus_id": None, "aicore_mhz": None, "rated_mhz": None,
        "freq_busy_pct": None}
    assert [(a["node"], a["npu"], a["code"]) for a in doc["alerts"]] == [("n2", 0, "npu-hot")]


# One sample line of the Prometheus text format 0.0.4: name, labels, value, no timestamp (node_exporter's textfile
# collector refuses timestamps)
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\} '
                    r'(-?[0-9.]+(?:e[+-]?[0-9]+)?)$')


def parsed(text):
    families, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            families[name] = kind
        elif not line.startswith("# HELP "):
            match = SAMPLE.match(line)
            assert match, line
            labels = {k: re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), v)
                      for k, v in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', match.group(2))}
            samples.append((match.group(1), labels, float(match.group(3))))
    return families, samples


def test_the_exposition_uses_npu_exporter_names_and_labels():
    sample = FleetSample(100.0, (node("node2", [reading(3, temp=97, health="Alarm")]),
                                 node('we"ird', [], error="unreachable")))
    families, samples = parsed(exposition(sample))
    assert set(families.values()) == {"gauge"}
    for name in ("npu_chip_info_utilization", "npu_chip_info_temperature", "npu_chip_info_power",
                 "npu_chip_info_health_status", "npu_chip_info_hbm_used_memory", "npu_chip_info_hbm_total_memory",
                 "npu_chip_info_name", "machine_npu_nums"):
        assert name in families
    temp = [s for s in samples if s[0] == "npu_chip_info_temperature"]
    assert temp == [("npu_chip_info_temperature",
                     {"container_name": "", "host": "node2", "id": "3", "model_name": "910B3-Ascend-V1",
                      "namespace": "", "pcie_bus_info": "0000:C3:00.0", "pod_name": "", "vdie_id": ""}, 97.0)]
    assert [s[2] for s in samples if s[0] == "npu_chip_info_health_status"] == [0.0]
    assert "name" in [s for s in samples if s[0] == "npu_chip_info_name"][0][1]
    up = {s[1]["host"]: s[2] for s in samples if s[0] == "dapo_top_node_up"}
    assert up == {"node2": 1.0, 'we"ird': 0.0}


def test_the_record_round_trips_and_skips_a_torn_line(tmp_path):
    path = tmp_path / recording.FILE_NAME
    window = Window()
    first = window.add((node("n1", [reading(0, temp=97), reading(1)]), node("n2", [], error="gone")), at=100.0)
    recording.append(path, first)
    with open(path, "a") as handle:
        handle.write('{"at": 105, "nodes": {"n1": {"npus": [[0, 0')   # a crash mid-line
    samples, bad = recording.read(path)
    assert bad == 1 and len(samples) == 1
    back = samples[0]
    assert back.nodes[0].npus[0].temp_c == 97 and back.nodes[1].error == "gone"
    assert [(a.code, a.node, a.npu) for a in back.alerts] == [(a.code, a.node, a.npu) for a in first.alerts]
    rows = re.findall(r"\[[^\[\]{}]*\]", path.read_text().splitlines()[0])
    assert len(rows) == 2 and all(len(row) < 60 for row in rows)   # about 40 bytes per NPU and sample


class FakeSampler:
    timeout = 1.0

    def __init__(self, samples):
        self.samples = list(samples)
        self.closed = False

    def sample(self, deadline=None):
        return self.samples.pop(0)

    def close(self):
        self.closed = True


def test_watch_records_every_check_and_says_an_alert_once_while_it_lasts(tmp_path):
    from dapo_ops.telemetry.series import HardwareWatch

    hot = (node("n1", [reading(0, temp=97)]),)
    cool = (node("n1", [reading(0, temp=50)]),)
    watch = HardwareWatch(FakeSampler([hot, hot, cool, hot]), tmp_path / recording.FILE_NAME)
    said = []
    for _ in range(4):
        assert watch.sample_once()
        said.append(watch.check())
    watch.close()
    assert [len(lines) for lines in said] == [1, 0, 0, 1] and watch.sampler.closed
    assert said[0][0].startswith("n1 NPU 0 is at 97 C") and "(check cooling" in said[0][0]
    samples, bad = recording.read(tmp_path / recording.FILE_NAME)
    assert bad == 0 and [s.nodes[0].npus[0].temp_c for s in samples] == [97, 97, 50, 97]


def test_the_frequency_of_each_npu_from_npu_smi_common(data_dir):
    from dapo_ops.ascend.npu_smi_common import parse_npu_smi_common
    from dapo_ops.errors import ParseError
    from dapo_ops.telemetry.sampler import MARK, frequency_command, parse_frequencies

    idle = (data_dir / "ascend" / "npu-smi-common-idle.txt").read_text()
    info = parse_npu_smi_common(idle)
    assert (info.rated_mhz, info.current_mhz, info.aicore_pct, info.temp_c) == (1800, 800, 0, 46)  # not the MCU's 38
    # the public sample as printed in a blog, its padding lost
    assert parse_npu_smi_common("Aicore Freq(MHZ) : 1850\nAicore curFreq(MHZ):800\n").rated_mhz == 1850
    with pytest.raises(ParseError, match="missing 'Aicore curFreq"):
        parse_npu_smi_common("\tAicore Freq(MHZ)  : 1800\n")
    assert frequency_command([0, 3]) == (f'for i in 0 3; do echo "{MARK}$i"; npu-smi info -t common -i "$i" 2>&1; '
                                         'done; exit 0')   # the last NPU's failure fails no other
    busy = idle.replace("curFreq(MHZ)            : 800", "curFreq(MHZ)            : 1300")
    output = f"{MARK}0\n{idle}{MARK}3\n{busy}{MARK}5\nThe NPU ID 5 is invalid.\n"
    assert parse_frequencies(output) == {0: (800, 1800, 0), 3: (1300, 1800, 0)}


def test_a_busy_npu_below_its_rated_frequency_is_reduced_and_an_idle_one_is_not():
    import dataclasses

    slow = dataclasses.replace(reading(2, aicore=85), aicore_mhz=1300, rated_mhz=1800, freq_busy_pct=80)
    idle = dataclasses.replace(reading(3, aicore=0), aicore_mhz=800, rated_mhz=1800, freq_busy_pct=0)
    full = dataclasses.replace(reading(4, aicore=85), aicore_mhz=1800, rated_mhz=1800, freq_busy_pct=85)
    idle_when_read = dataclasses.replace(reading(5, aicore=85), aicore_mhz=800, rated_mhz=1800, freq_busy_pct=1)
    found = alerts([FleetSample(100.0, (node("n1", [slow, idle, full, idle_when_read]),))])
    reduced = [a for a in found if a.code == "npu-freq-reduced"]
    assert codes(reduced) == [(WARNING, "npu-freq-reduced", "n1", 2)]
    assert "1300 of its 1800 MHz" in reduced[0].message
    families, samples = parsed(exposition(FleetSample(100.0, (node("n1", [slow, reading(5)]),))))
    assert [(s[1]["id"], s[2]) for s in samples if s[0] == "npu_chip_info_aicore_current_freq"] == [("2", 1300.0)]


def test_the_sampler_asks_a_slow_node_once_and_closes_every_connection_it_made(monkeypatch, data_dir):
    import threading

    from dapo_ops.fleet import ssh
    from dapo_ops.fleet.ssh import CommandResult, HostSpec
    from dapo_ops.telemetry.sampler import Sampler

    table = (data_dir / "ascend" / "npu-smi-info-8npu-processes.txt").read_text()
    release, opened, closed = threading.Event(), [], []

    class Conn:
        def close(self):
            closed.append(self)

    def connect(host):
        if host.name == "slow":
            release.wait(10)
        conn = Conn()
        opened.append(conn)
        return conn

    def run(conn, host, command, timeout):
        return CommandResult(host.name, command, 0, table, "", 0.01)

    monkeypatch.setattr(ssh, "connect", connect)
    monkeypatch.setattr(ssh, "run", run)
    hosts = [HostSpec(name, "10.0.0.1", data_dir) for name in ("fast", "slow")]
    sampler = Sampler(hosts)
    first = sampler.sample(deadline=time.monotonic() + 0.3)
    assert first[0].ok and len(first[0].npus) == 8 and first[1].error == "no answer in time"
    second = sampler.sample(deadline=time.monotonic() + 0.3)
    assert second[1].error == "still answering an earlier sample"
    sampler.close()
    release.set()
    for _ in range(100):
        if len(opened) == 2 and len(closed) == 2:
            break
        time.sleep(0.02)
    assert len(opened) == 2 and sorted(map(id, closed)) == sorted(map(id, opened))   # one each, none left open


def test_a_record_that_cannot_be_written_stops_the_sampling_and_never_the_watch(tmp_path):
    from dapo_ops.telemetry.series import HardwareWatch, hardware_watch

    sampler = FakeSampler([(node("n1", [reading(0)]),)] * 3)
    watch = HardwareWatch(sampler, tmp_path, period=0.01).start()   # a directory: the append fails
    for _ in range(200):
        said = watch.check()
        if said:
            break
        time.sleep(0.01)
    assert len(said) == 1 and said[0].startswith("the NPUs are no longer sampled: IsADirectoryError")
    watch._thread.join(timeout=5)
    assert not watch._thread.is_alive() and sampler.closed and len(sampler.samples) == 2   # it stopped sampling
    assert watch.check() == []
    watch.close()
    assert hardware_watch([], tmp_path, enabled=False).check() == []


def test_watch_samples_on_its_own_thread_at_its_period_and_stops_on_close(tmp_path):
    from dapo_ops.telemetry.series import HardwareWatch

    sampler = FakeSampler([(node("n1", [reading(0)]),)] * 1000)
    watch = HardwareWatch(sampler, tmp_path / recording.FILE_NAME, period=0.02).start()
    time.sleep(0.3)
    watch.close()
    taken = 1000 - len(sampler.samples)
    assert 3 <= taken <= 20 and sampler.closed and not watch._thread.is_alive()
    assert len(recording.read(tmp_path / recording.FILE_NAME)[0]) == taken


def test_the_screen_keeps_its_columns_for_a_node_without_a_sample_and_marks_the_hot_npu():
    from rich.console import Console

    from dapo_ops.telemetry.view import screen

    sample = Window().add((node("node1", [reading(0), reading(3, temp=97)], expected=2),
                           node("node2", [], error="unreachable: " + "x" * 300, expected=2)), at=100.0)
    console = Console(width=80, record=True, color_system=None)
    console.print(screen(sample, "title"))
    text = console.export_text()
    assert "HBM MB" in text and "health" in text and "node2" in text and "no sample" in text
    assert "97 C" in text and "node1 NPU 3 is at 97 C" in " ".join(text.split())
