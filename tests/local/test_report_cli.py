"""`dapo-ops report` end to end on the fixtures: exit codes, the files it writes (JSON, text, PNG plots of the
expected size, the self-contained HTML page), the baseline, a run's fetched logs, and --follow's loop."""

import base64
import io
import json
import os
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dapo_ops.report.steps import RunMetrics, StepLine
from tests.cli_runner import run_cli

DATA = Path(__file__).resolve().parents[1] / "data" / "report"
INVENTORY = Path(__file__).resolve().parents[1] / "data" / "inventory" / "two-nodes"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


class Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs)["src"])


def report(tmp_path, *args):
    result = run_cli("report", *args, "--out", tmp_path / "out", "--json")
    return result, (json.loads(result.stdout) if result.returncode == 0 else None)


def test_a_log_gives_the_summary_the_plots_and_the_page(tmp_path):
    result, doc = report(tmp_path, DATA / "validation.log", "--baseline", "seed")
    assert result.returncode == 0, result.stderr
    assert doc["summary"]["step_time_s"]["median"] == 150.0
    assert doc["comparison"]["figures"]["step_time_s"]["ratio"] == pytest.approx(125.0)
    steps = doc.pop("steps")
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == doc
    assert "step time" in (tmp_path / "out" / "summary.txt").read_text()
    for name in ("score", "response_length", "step_time", "tokens_per_s"):
        data = Path(doc["files"][name]).read_bytes()
        assert png_size(data) == (800, 450) and len(data) > 5000, name
    page = Images()
    page.feed((tmp_path / "out" / "report.html").read_text())
    assert len(page.sources) == 4
    for source in page.sources:
        assert source.startswith("data:image/png;base64,")
        assert png_size(base64.b64decode(source.split(",", 1)[1])) == (800, 450)
    text = (tmp_path / "out" / "report.html").read_text()
    assert 'src="http' not in text and "<link" not in text and "<script" not in text   # nothing from outside


def test_every_steps_logged_values_go_to_steps_csv_and_steps_jsonl(tmp_path):
    import csv

    result, doc = report(tmp_path, DATA / "numpy2.log")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader((tmp_path / "out" / "steps.csv").open()))
    lines = [json.loads(line) for line in (tmp_path / "out" / "steps.jsonl").read_text().splitlines()]
    assert doc["files"]["steps_csv"].endswith("steps.csv") and doc["steps"] == lines
    assert [r["step"] for r in rows] == [str(line["step"]) for line in lines] and len(rows) >= 3
    logged = (DATA / "numpy2.log").read_text()
    for row in rows:    # each value as the log has it (numpy's np.float64(x) unwrapped)
        for key, value in row.items():
            if key != "step" and value:
                assert f"{key}:{value} " in logged or f"{key}:np.float64({value})" in logged or \
                    f"{key}:np.int64({value})" in logged or f"{key}:{value}\n" in logged, (key, value)


def test_the_table_for_people(tmp_path):
    result = run_cli("report", DATA / "plain.log", "--out", tmp_path / "out", env=dict(os.environ, COLUMNS="200"))
    assert result.returncode == 0, result.stderr
    assert "tokens/s per NPU" in result.stdout and "97.2" in result.stdout and "3,111" in result.stdout
    assert "not logged: timing_s/update_weights, val-core/*" in " ".join(result.stdout.split())


def test_a_dry_run_reports_what_exists(tmp_path):
    result, doc = report(tmp_path, DATA / "dry_mode.log")
    assert result.returncode == 0, result.stderr
    assert doc["summary"]["steps"]["trained"] == 0
    assert "no step has timing_s/step" in result.stderr
    assert png_size((tmp_path / "out" / "step_time.png").read_bytes()) == (800, 450)


@pytest.mark.parametrize("args, code, message", [
    (["missing.log"], 2, "missing.log: no such log file or run"),
    ([DATA / "no_steps.log"], 1, "no verl step line"),
    ([DATA / "plain.log", "--baseline", "nowhere"], 2, "baseline 'nowhere' is neither"),
    ([DATA / "plain.log", "--npus", "0"], 2, "--npus must be a positive number"),
    ([DATA / "plain.log", "--follow", "--interval", "nan"], 2, "--interval must be a positive number"),
])
def test_bad_input_and_no_steps(tmp_path, args, code, message):
    result, _ = report(tmp_path, *args)
    assert result.returncode == code
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_previous_report_or_a_log_as_the_baseline(tmp_path):
    first, _ = report(tmp_path, DATA / "plain.log")
    assert first.returncode == 0
    again = run_cli("report", DATA / "numpy2.log", "--out", tmp_path / "again", "--json",
                    "--baseline", tmp_path / "out" / "summary.json")
    assert [f["ratio"] for f in json.loads(again.stdout)["comparison"]["figures"].values()] == [pytest.approx(1.0)] * 4
    log = run_cli("report", DATA / "numpy2.log", "--out", tmp_path / "log", "--json", "--baseline", DATA / "plain.log")
    assert json.loads(log.stdout)["comparison"]["baseline"] == "plain.log"


def saved_run(tmp_path, monkeypatch, state: str):
    """Run r1 on the two-nodes inventory, recorded in a temporary runs directory."""
    from dapo_ops.launch import records

    monkeypatch.setattr(records, "RUNS_DIR", tmp_path / "runs")
    run = records.RunRecord(run_id="r1", job="j", nodes=["a2-node01", "a2-node02"], head="a2-node01",
                            head_address="192.0.2.11:6379", dashboard="http://192.0.2.11:8265",
                            node_dir="/var/lib/dapo-ops/runs/r1", submission_id="dapo-r1", state=state)
    run.save()
    return run


def test_a_run_fetches_its_console_and_jsonl(tmp_path, monkeypatch):
    from dapo_ops.fleet import ssh
    from dapo_ops.launch import cluster

    run = saved_run(tmp_path, monkeypatch, "succeeded")
    shutil.copyfile(Path(__file__).resolve().parents[2] / "jobs" / "qwen3-30b-a3b-dapo.yaml", run.directory / "job.yaml")
    console = (DATA / "resume-2.log").read_text()        # the console lacks steps 1 and 2: the JSONL has them
    monkeypatch.setattr(cluster, "job_logs", lambda *a: a[-1].write(console) and 0)   # exit 0
    asked = []

    def run_on(host, command, timeout=60):
        asked.append(host.name)
        found = host.name == "a2-node02"
        return ssh.CommandResult(host.name, command, 0 if found else 1,
                                 (DATA / "metrics.jsonl").read_text() if found else "", "", 0.1)

    monkeypatch.setattr(ssh, "run_on", run_on)
    result = run_cli("report", "r1", "-i", INVENTORY, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert asked == ["a2-node01", "a2-node02"]
    assert doc["summary"]["steps"]["trained"] == 3 and doc["summary"]["tokens_per_s"]["npus"] == 32
    out = tmp_path / "runs" / "r1" / "report"
    assert (out / "console.log").read_text() == console and (out / "metrics.jsonl").exists()
    assert (out / "report.html").exists()


def test_follow_redraws_until_the_job_ends():
    from rich.console import Console

    from dapo_ops.report.follow import follow

    loads, waits = [], []

    def load():
        run = RunMetrics()
        run.add(StepLine(len(loads), {"timing_s/step": 1.0}))
        loads.append(run)
        return run

    ends = iter([False, False, True])
    last = follow(load, lambda run: str(sorted(run.steps)), lambda: next(ends), 5.0, Console(file=io.StringIO()),
                  sleep=waits.append)
    assert len(loads) == 3 and waits == [5.0, 5.0] and last is loads[-1]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


# CI installs Debian's chromium (scripts/bootstrap.sh): there a missing one fails the test instead of skipping it
@pytest.mark.skipif(chromium() is None and os.environ.get("CI") != "true",
                    reason="no Chromium here (scripts/bootstrap.sh installs Debian's)")
def test_the_page_opens_in_headless_chromium(tmp_path):
    from PIL import Image

    result, doc = report(tmp_path, DATA / "validation.log", "--baseline", "seed")
    assert result.returncode == 0
    shot = tmp_path / "shot.png"
    subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1000,2600", Path(doc["files"]["html"]).as_uri()],
                   check=True, capture_output=True, timeout=120)
    image = Image.open(shot).convert("RGB")
    assert image.size == (1000, 2600)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50      # the tables and the four plots drew, not a blank page


def test_a_resumed_run_s_report_joins_the_console_kept_from_the_attempt_it_resumes(tmp_path, monkeypatch):
    """launch --resume: the first attempt's console was kept in its run directory when a lost node ended it
    (launch/archive.py); the report of the second joins both, the replayed step 3 taken from the second."""
    from dapo_ops.fleet import ssh
    from dapo_ops.launch import cluster, records

    monkeypatch.setattr(records, "RUNS_DIR", tmp_path / "runs")
    common = dict(job="j", nodes=["a2-node01", "a2-node02"], head="a2-node01", head_address="192.0.2.11:6379",
                  dashboard="http://192.0.2.11:8265", chain="r1")
    first = records.RunRecord(run_id="r1", node_dir="/var/lib/dapo-ops/runs/r1", submission_id="dapo-r1",
                              state="failed", **common)
    unsubmitted = records.RunRecord(run_id="r2", node_dir="/var/lib/dapo-ops/runs/r2", state="failed",
                                    resumed_from="r1", resume_step=2, **common)   # refused at the lock
    second = records.RunRecord(run_id="r3", node_dir="/var/lib/dapo-ops/runs/r3", submission_id="dapo-r3",
                               state="running", resumed_from="r1", resume_step=2, **common)
    for run in (first, unsubmitted, second):
        run.save()
    shutil.copyfile(DATA / "resume-1.log", first.directory / "console.log")
    shutil.copyfile(Path(__file__).resolve().parents[2] / "jobs" / "qwen3-30b-a3b-dapo.yaml",
                    second.directory / "job.yaml")
    monkeypatch.setattr(cluster, "job_logs", lambda *a: a[-1].write((DATA / "resume-2.log").read_text()) and 0)
    monkeypatch.setattr(ssh, "run_on", lambda host, command, timeout=60: ssh.CommandResult(
        host.name, command, 1, "", "", 0.1))
    result = run_cli("report", "r3", "-i", INVENTORY, "--json")
    assert result.returncode == 0, result.stderr
    steps = json.loads(result.stdout)["summary"]["steps"]
    assert (steps["first"], steps["last"], steps["trained"], steps["replayed"]) == (1, 3, 3, [3])
    assert json.loads(result.stdout)["summary"]["step_time_s"]["median"] == 150.0   # step 3's 999 s was replaced
    assert json.loads(result.stdout)["summary"]["sources"][0].endswith("r1/console.log")


def test_a_run_whose_ray_is_gone_is_reported_from_the_console_kept_when_it_ended(tmp_path, monkeypatch):
    from dapo_ops.fleet import ssh
    from dapo_ops.launch import cluster

    run = saved_run(tmp_path, monkeypatch, "stopped")
    monkeypatch.setattr(cluster, "job_logs", lambda *a: a[-1].write("ConnectionError: no dashboard\n") and 1)
    monkeypatch.setattr(ssh, "run_on", lambda host, command, timeout=60: ssh.CommandResult(
        host.name, command, 1, "", "", 0.1))
    gone = run_cli("report", "r1", "-i", INVENTORY, "--json")
    assert gone.returncode != 0 and "`ray job logs` on a2-node01 exited 1: ConnectionError: no dashboard" in gone.stderr
    shutil.copyfile(DATA / "resume-1.log", run.directory / "console.log")
    kept = run_cli("report", "r1", "-i", INVENTORY, "--json")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["summary"]["steps"]["trained"] == 3


def test_recorded_hardware_is_plotted_under_the_steps_and_a_slow_step_names_its_alerts(tmp_path):
    from dapo_ops.telemetry import recording
    from dapo_ops.telemetry.alerts import Alert
    from dapo_ops.telemetry.model import FleetSample, NodeSample, NpuReading, RunProgress

    times = [10.0, 10.0, 10.0, 30.0, 10.0, 10.0]
    log = tmp_path / "run.log"
    log.write_text("".join(f"step:{s} - timing_s/step:{t} - perf/total_num_tokens:5000\n"
                           for s, t in enumerate(times, 1)))
    hot = Alert("warning", "npu-hot", "node2", 3, "node2 NPU 3 is at 97 C, within 10 C of throttling at 105 C",
                "cooling")
    hardware = tmp_path / "hardware.jsonl"
    for t in range(0, 80, 5):   # the steps run from 1000 to 1080; step 4 from 1030 to 1060
        step = max((s for s, end in ((1, 10), (2, 20), (3, 30), (4, 60), (5, 70), (6, 80)) if end <= t), default=0)
        during = 35 <= t <= 55
        nodes = tuple(NodeSample(name, 1000.0 + t, tuple(
            NpuReading(k, 0, k, "910B3", "OK", 30 if during and name == "node2" else 85, 50000, 65536,
                       97 if during and name == "node2" and k == 3 else 60, 320.0) for k in range(4)))
            for name in ("node1", "node2"))
        recording.append(hardware, FleetSample(1000.0 + t, nodes, RunProgress("r", "running", step=step),
                                               (hot,) if during else ()))
    hostile = ["not json", "[1, 2]", '{"at": "nan", "nodes": {}}', '{"at": NaN, "nodes": {}}',
               '{"at": 1e999, "nodes": {}}', '{"at": 1000, "nodes": []}', '{"at": 1000, "step": true, "nodes": {}}',
               '{"at": 1000, "nodes": {"n": {"npus": [["a","b","c","d","e","f","g","h","i"]]}}}',
               '{"at": 1000, "nodes": {"n": {"npus": [{"0": 1}]}}}',
               '{"at": 1000, "nodes": {"n": {"npus": [[0,0,0,[50],50,1.0,1,2,"OK"]]}}}',
               '{"at": 1000, "nodes": {}, "alerts": [{"severity": ["error"], "code": "x", "node": "n", '
               '"npu": null, "message": "m", "check": "c"}]}',
               '{"at": 1' + "0" * 5000 + ', "nodes": {}}', "[" * 100000]
    with open(hardware, "a") as handle:
        handle.write("\n".join(hostile) + "\n")
    result, doc = report(tmp_path, log, "--hardware", hardware)
    assert result.returncode == 0, result.stderr
    section = doc["summary"]["hardware"]
    assert section["samples"] == 16 and section["unreadable_lines"] == len(hostile) and section["steps_placed"]
    json.loads((tmp_path / "out" / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert [(s["step"], s["ratio"]) for s in section["slow_steps"]] == [(4, 3.0)]
    assert [(a["node"], a["npu"], a["code"]) for a in section["slow_steps"][0]["alerts"]] == [("node2", 3, "npu-hot")]
    assert png_size(Path(doc["files"]["hardware"]).read_bytes()) == (800, 630)
    html = (tmp_path / "out" / "report.html").read_text()
    page = Images()
    page.feed(html)
    assert len(page.sources) == 5 and "<h2>hardware</h2>" in html
    assert html.index('alt="step_time"') < html.index('alt="hardware"') < html.index('alt="tokens_per_s"')
    assert "node2 NPU 3 is at 97 C" in html and "3.00×" in html
    missing = run_cli("report", log, "--hardware", tmp_path / "nope.jsonl", "--out", tmp_path / "o2")
    assert missing.returncode == 2 and "--hardware" in missing.stderr and "Traceback" not in missing.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("garbage\n")
    refused = run_cli("report", log, "--hardware", empty, "--out", tmp_path / "o3")
    assert refused.returncode == 2 and "no sample in it (1 unreadable line(s))" in refused.stderr
