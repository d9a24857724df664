"""`dapo-ops doctor` (issue 16), through the CLI on log fixtures written from the documented formats: one fixture
per signature, the two-node case (node2's rank 21 fails first, node1 shows the EI0006 fallout), `explain`, and the
exit codes 0 (no known failure), 1 (a diagnosis), 2 (bad input)."""

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from dapo_ops.cli.doctor import parse_since
from dapo_ops.doctor.bundle import read_inputs
from dapo_ops.doctor.diagnose import chain_between, diagnose
from dapo_ops.doctor.signatures import default_catalog
from dapo_ops.errors import UsageError
from tests.cli_runner import run_cli

DATA = Path(__file__).parents[1] / "data" / "doctor"
SINGLE = sorted(p for p in (DATA / "single").iterdir() if p.is_dir())
TWO_NODE = DATA / "two-node"


def test_every_signature_has_its_fixture():
    assert {p.name for p in SINGLE} == set(default_catalog().by_id)


@pytest.mark.parametrize("fixture", SINGLE, ids=lambda p: p.name)
def test_each_fixture_is_diagnosed_as_its_signature(fixture):
    signature = default_catalog().by_id[fixture.name]
    result = run_cli("doctor", fixture, "--json")
    if signature.noise:
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["noise_hidden"] >= 1
        return
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["root"]["signature"] == fixture.name
    assert (report["note"] is None) == signature.fatal
    assert report["root"]["evidence"][0]["file"].startswith(f"{fixture.name}/")
    quoted = report["root"]["evidence"][0]["text"]          # the key line itself, quoted as evidence
    assert default_catalog().match(quoted)[0].id == fixture.name, quoted


@pytest.mark.parametrize("fixture, words", [
    ("acl-aicore-exception", ["operator GatherV3"]),
    ("aclnn-op-binary-missing", ["operator Range"]),
    ("aclnn-call-failed", ["operator aclnnGroupedMatmulV4"]),
    ("hccl-port-in-use", ["port 60000"]),                     # from the TraceBack line under EJ0003
    ("torch-store-port-in-use", ["port 29500"]),
    ("ray-port-in-use", ["port 6380"]),
    ("transformers-version-mismatch", ["needs tokenizers>=0.22.0,<=0.23.0, found tokenizers==0.21.1",
                                       "transformers has no Qwen3MoeConfig"]),
])
def test_what_a_signature_captures_is_decoded_in_the_root_cause(fixture, words):
    report = json.loads(run_cli("doctor", DATA / "single" / fixture, "--json").stdout)
    assert all(word in report["root"]["decoded"] for word in words), report["root"]["decoded"]
    assert all(word in report["root"]["cause"] for word in words)


def test_two_nodes_name_node2_rank_21_and_node1_s_ei0006_as_its_consequence():
    result = run_cli("doctor", TWO_NODE, "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    root = report["root"]
    assert (root["node"], root["rank"], root["npu"], root["signature"]) == ("node2", 21, 5, "acl-device-setup")
    assert root["time"] == "2025-11-02T02:14:03+00:00"
    assert root["action"] == "dapo-ops audit --limit node2"
    assert {e["file"] for e in root["evidence"]} == {"node2/ray/worker-9f3c01000000-4121.err",
                                                     "node2/plog/plog-4121_20251102101359.log"}
    fallout = {(c["node"], c["rank"], c["signature"]): c for c in report["consequences"]}
    ei0006 = fallout[("node1", 3, "hccl-socket-timeout")]
    assert ei0006["chain"] == ["acl-device-setup", "hccl-socket-timeout"]
    assert fallout[("node1", 3, "hccl-init-error-code")]["decoded"] == ["HcclResult 9 (timeout)"]
    assert ("node1", 0, "hccl-socket-timeout") in fallout and ("node1", 3, "ray-actor-died") in fallout
    assert report["noise_hidden"] == 1
    assert "failed first on node2 rank 21 NPU 5: acl-device-setup" in result.stderr


def test_the_human_report_names_root_evidence_fix_and_chain():
    result = run_cli("doctor", TWO_NODE)
    assert result.returncode == 1
    assert "ROOT CAUSE node2 rank 21 NPU 5: acl-device-setup" in result.stdout
    assert "node2/plog/plog-4121_20251102101359.log:3" in result.stdout
    assert "run: dapo-ops audit --limit node2" in result.stdout
    assert "caused by the root cause: acl-device-setup -> hccl-socket-timeout" in result.stdout
    assert "TBE Subprocess" not in result.stdout


def test_without_the_nodes_clocks_node1_would_look_first(tmp_path):
    """What the normalisation is for: node1's stamps are UTC, node2's UTC+8; read naively, node1's 02:44 comes
    before node2's 10:14 and its HCCL init failure would be blamed."""
    copy = shutil.copytree(TWO_NODE, tmp_path / "bundle")
    (copy / "bundle.json").unlink()
    (copy / "node1" / "console.log").unlink()   # its forwarded lines name nodes by address, which bundle.json maps
    naive = diagnose(read_inputs([copy]))
    assert (naive.root.node, naive.root.signature) == ("node1", "hccl-init-error-code")


def test_since_leaves_out_what_came_before():
    result = run_cli("doctor", TWO_NODE, "--since", "2025-11-02T02:30:00Z", "--json")
    report = json.loads(result.stdout)
    assert report["root"]["node"] == "node1"
    assert report["note"] is None and report["root"]["signature"] == "hccl-init-error-code"


def test_no_known_failure_is_exit_0(tmp_path):
    log = tmp_path / "node1" / "console.log"
    log.parent.mkdir()
    log.write_text("(TaskRunner pid=88) step:1 - timing_s/step:812.3\n")
    result = run_cli("doctor", log)
    assert result.returncode == 0, result.stderr
    assert "no known failure" in result.stdout


@pytest.mark.parametrize("args, message", [
    (("/nonexistent/doctor-logs",), "no such file, directory or run"),
    (("no-such-run",), "no run 'no-such-run'"),
    (("--since", "yesterday-ish", str(TWO_NODE)), "--since 'yesterday-ish'"),
    (("explain", "hello"), "is not a code doctor reads"),
    (("explain",), "is not a code doctor reads"),
])
def test_bad_input_is_exit_2(args, message, tmp_path, monkeypatch):
    monkeypatch.setattr("dapo_ops.launch.records.RUNS_DIR", tmp_path)
    result = run_cli("doctor", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr


def test_an_empty_directory_is_bad_input(tmp_path):
    result = run_cli("doctor", tmp_path)
    assert result.returncode == 2 and "no log files" in result.stderr


def test_a_bad_bundle_description_is_bad_input(tmp_path):
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "dmesg.txt").write_text("[ 1.0] x\n")
    (tmp_path / "bundle.json").write_text(json.dumps({"schema": "dapo-ops/doctor-bundle/v1",
                                                      "nodes": {"node1": {"utc_offset": "CET"}}}))
    result = run_cli("doctor", tmp_path)
    assert result.returncode == 2 and "utc_offset 'CET'" in result.stderr


@pytest.mark.parametrize("words, decoded, signature", [
    (("EI0006",), "CANN error message EI0006: HCCL", "hccl-socket-timeout"),
    (("507033",), "ACL 507033: internal error, reported by the runtime", "acl-device-setup"),
    (("ERR02200",), "torch_npu DIST (distributed), an HCCL call failed", "torch-npu-error-code"),
    (("HCCL", "11"), "HcclResult 11 (TCP connect failed)", "hccl-init-error-code"),
    (("0x80e01801",), None, "npu-hbm-multibit-ecc-event"),
])
def test_explain_decodes_a_code(words, decoded, signature):
    result = run_cli("doctor", "explain", *words, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    if decoded:
        assert any(decoded in line for line in report["decoded"]), report["decoded"]
    assert signature in [s["id"] for s in report["signatures"]]


def test_explain_a_well_formed_code_it_does_not_know_is_exit_0():
    result = run_cli("doctor", "explain", "ERR01003")
    assert result.returncode == 0
    assert "OPS (operators), invalid value" in result.stdout
    assert "not in dapo-ops' signatures" in result.stdout


def test_chains_follow_the_causes_edges():
    catalog = default_catalog()
    assert chain_between(catalog, "acl-hbm-uce", "hccl-notify-timeout") == ["acl-hbm-uce", "hccl-notify-timeout"]
    assert chain_between(catalog, "npu-port-link-down", "hccl-op-error-code") == [
        "npu-port-link-down", "hccl-op-error-code"]
    assert chain_between(catalog, "ray-actor-died", "acl-hbm-uce") == []


def test_since_takes_iso_times_and_durations():
    now = datetime(2026, 12, 1, 17, 0, tzinfo=timezone.utc)
    assert parse_since("2h", now) == datetime(2026, 12, 1, 15, 0, tzinfo=timezone.utc)
    assert parse_since("2026-12-01T16:00", now) == datetime(2026, 12, 1, 16, 0, tzinfo=timezone.utc)
    assert parse_since(None) is None
    with pytest.raises(UsageError):
        parse_since("soon")


def test_a_collected_bundle_shows_what_was_not_collected_and_the_fresh_audit(tmp_path):
    bundle = shutil.copytree(TWO_NODE, tmp_path / "doctor")
    description = json.loads((bundle / "bundle.json").read_text())
    description["problems"] = {"console": "node1: ray job logs failed"}
    (bundle / "bundle.json").write_text(json.dumps(description))
    (bundle / "audit.json").write_text(json.dumps({"findings": [
        {"host": "node2", "npu": 5, "severity": "error", "message": "NPU 5 health is Critical"}]}))
    (bundle / "audit" / "node2").mkdir(parents=True)
    (bundle / "audit" / "node2" / "npu_smi_info.txt").write_text("EI0006 in a file that is no log\n")
    result = run_cli("doctor", bundle)
    assert result.returncode == 1
    assert "audit now: error node2 NPU 5: NPU 5 health is Critical" in result.stdout
    assert "not collected (console): node1: ray job logs failed" in result.stdout
    assert "ROOT CAUSE node2 rank 21 NPU 5" in result.stdout


def test_a_task_runner_failure_in_the_head_s_console_is_placed_on_the_node_ray_names(tmp_path):
    """The simulated fleet's case: the data file is missing on node2, where Ray placed the TaskRunner; the head's
    console prints the exception under Ray's `ray::TaskRunner.run() (pid=N, ip=A)` header."""
    (tmp_path / "node1").mkdir()
    (tmp_path / "bundle.json").write_text(json.dumps({"schema": "dapo-ops/doctor-bundle/v1", "nodes": {
        "node1": {"address": "10.78.0.11"}, "node2": {"address": "10.78.0.12"}}}))
    (tmp_path / "node1" / "console.log").write_text(
        "2025-11-02 10:20:01,500\tINFO worker.py:1852 -- Connecting to existing Ray cluster\n"
        "ray.exceptions.RayTaskError(FileNotFoundError): ray::TaskRunner.run() (pid=3012, ip=10.78.0.12, "
        "actor_id=5d1f)\n"
        '  File "/opt/dapo-ops/src/verl/recipe/dapo/main_dapo.py", line 98, in run\n'
        "FileNotFoundError: Unable to find '/data/dapo/dapo-math-17k.parquet'\n")
    result = run_cli("doctor", tmp_path, "--json")
    assert result.returncode == 1
    root = json.loads(result.stdout)["root"]
    assert (root["node"], root["signature"]) == ("node2", "verl-data-or-model-missing")
    assert "node2" in root["fix"] and root["evidence"][0]["file"] == "node1/console.log"


def test_507899_on_a_node_without_npus_is_noise(tmp_path):
    (tmp_path / "controller").mkdir()
    (tmp_path / "controller" / "console.log").write_text(
        "RuntimeError: NPU function error: aclrtIpcMemGetExportKey, error code is 507899\n")
    (tmp_path / "bundle.json").write_text(json.dumps({"schema": "dapo-ops/doctor-bundle/v1",
                                                      "nodes": {"controller": {"npus": 0}}}))
    result = run_cli("doctor", tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["noise_hidden"] == 1
    (tmp_path / "bundle.json").unlink()
    assert run_cli("doctor", tmp_path).returncode == 1


def test_doctor_run_copies_plogs_from_since_or_the_last_day():
    from dapo_ops.cli.doctor import collection_minutes

    now = datetime(2026, 12, 1, 17, 0, tzinfo=timezone.utc)
    assert collection_minutes(None) == 24 * 60
    assert collection_minutes(parse_since("2h", now), now) == 121
