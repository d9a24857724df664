"""`dapo-ops top` on a provisioned 2 x 16-NPU simulated fleet whose node2 NPU 3 runs hot (issue 31's done-when):
one JSON document of 32 NPUs with the alert, npu-exporter's metrics, a node that cannot be sampled, and the
continuous mode over one SSH connection per node."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from dapo_ops.paths import PROJECT_ROOT
from dapo_sim.fleet import FleetSpec

from .helpers import hosts, sh, sigint_as_at_a_terminal


@pytest.fixture(scope="module")
def fleet(sim):
    sim.down()
    sim.up(FleetSpec(nodes=2, provisioned=True, faults=("node2.npu3:temp=97",)))
    return hosts()


def top(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "dapo_ops.cli", "top", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_once_json_lists_32_npus_and_flags_the_hot_one_by_node_and_id(fleet):
    result = top("--once", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["npus"] == 32 and [n["node"] for n in doc["nodes"]] == ["node1", "node2"]
    for node in doc["nodes"]:
        assert node["ok"] and node["expected_npus"] == 16 and node["npu_smi_seconds"] > 0
        assert [n["device"] for n in node["npus"]] == list(range(16))
        for npu in node["npus"]:
            assert npu["aicore_pct"] == 0 and npu["hbm_total_mb"] == 65536 and npu["hbm_used_mb"] > 0
            assert npu["power_w"] > 0 and npu["health"] == "OK" and npu["temp_c"] > 0
            assert (npu["aicore_mhz"], npu["rated_mhz"]) == (800, 1800)   # idle; read at the first sample
    assert doc["nodes"][1]["npus"][3]["temp_c"] == 97
    assert [(a["node"], a["npu"], a["code"], a["severity"]) for a in doc["alerts"]] == [
        ("node2", 3, "npu-hot", "warning")]
    assert "cooling" in doc["alerts"][0]["check"]
    screen = top("--once")   # for people: a table, the alert under it
    assert screen.returncode == 0 and "node2 NPU 3 is at 97 C" in " ".join(screen.stdout.split())


def test_prometheus_writes_npu_exporter_names_and_the_textfile_whole(fleet, tmp_path):
    result = top("--once", "--prometheus", "--textfile", str(tmp_path / "npu.prom"))
    assert result.returncode == 0, result.stderr
    names = set(re.findall(r"^# TYPE (\S+) gauge$", result.stdout, re.M))
    assert {"npu_chip_info_utilization", "npu_chip_info_temperature", "npu_chip_info_power",
            "npu_chip_info_health_status", "npu_chip_info_hbm_used_memory", "npu_chip_info_hbm_total_memory",
            "npu_chip_info_name", "machine_npu_nums"} <= names
    assert re.search(r'^npu_chip_info_temperature\{[^}]*host="node2",id="3",[^}]*\} 97$', result.stdout, re.M)
    assert len(re.findall(r"^npu_chip_info_temperature\{", result.stdout, re.M)) == 32
    written = (tmp_path / "npu.prom").read_text()
    assert written.splitlines()[:2] == result.stdout.splitlines()[:2] and written.endswith("\n")
    assert oct((tmp_path / "npu.prom").stat().st_mode & 0o777) == "0o644"
    assert not [p for p in tmp_path.iterdir() if p.name != "npu.prom"]   # no temporary file left


def test_a_node_that_cannot_be_sampled_is_named_and_fails_once(fleet):
    def nft(*args):
        subprocess.run(["ip", "netns", "exec", "dapo-node2", "nft", *args], check=True)

    nft("add", "table", "inet", "dapo_test_top")
    try:
        nft("add chain inet dapo_test_top input { type filter hook input priority 0; }")
        nft("add rule inet dapo_test_top input tcp dport 22 ip saddr 10.77.0.1 reject with tcp reset")
        result = top("--once", "--json")
    finally:
        nft("delete", "table", "inet", "dapo_test_top")
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["nodes"][0]["ok"] and len(doc["nodes"][0]["npus"]) == 16
    assert not doc["nodes"][1]["ok"] and "unreachable" in doc["nodes"][1]["error"]
    assert ("node2", None, "no-sample", "error") in [(a["node"], a["npu"], a["code"], a["severity"])
                                                      for a in doc["alerts"]]
    assert "error alert(s): node2 no-sample" in result.stderr
    assert top("--once", "--json", "--limit", "node1").returncode == 0


def accepted(host) -> int:
    return int(sh(host, "grep -c 'Accepted publickey' /var/log/sshd.log || true").stdout.strip() or 0)


def test_continuous_json_keeps_one_connection_per_node_and_ends_on_ctrl_c(fleet):
    before = {name: accepted(h) for name, h in fleet.items()}
    process = subprocess.Popen([sys.executable, "-m", "dapo_ops.cli", "top", "--interval", "0.5", "--json"],
                               cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=sigint_as_at_a_terminal)
    lines = []
    deadline = time.monotonic() + 60
    while len(lines) < 4 and time.monotonic() < deadline:
        lines.append(process.stdout.readline())
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    docs = [json.loads(line) for line in lines]
    assert len(docs) == 4 and all(d["npus"] == 32 for d in docs)
    assert docs[0]["at"] < docs[-1]["at"]
    # each node was connected to once for all four samples (the check's own `sh` adds one per node)
    assert {name: accepted(h) - before[name] for name, h in fleet.items()} == {"node1": 2, "node2": 2}


@pytest.mark.parametrize("args, message", [
    (("--once", "--json", "--prometheus"), "choose one"),
    (("--interval", "0"), "--interval must be a positive number"),
    (("--interval", "nan", "--once"), "--interval must be a positive number"),
    (("--interval", "inf"), "--interval must be a positive number"),
    (("--once", "--limit", "node9"), "matches no host"),
    (("no-such-run", "--once"), "no-such-run"),
    (("--once", "--textfile", "/nonexistent/dir/npu.prom"), "no directory"),
])
def test_bad_input_is_one_line_and_exit_2(fleet, args, message):
    result = top(*args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
