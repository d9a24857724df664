"""The audit of the whole Python closure: every installed distribution (fact python_dists) against the lock in force
for the host's platform (manifest `lock:`), per host and by the fleet majority, in the JSON, the table and the
Prometheus text."""

import io
import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console

from dapo_ops.audit.analyze import analyze
from dapo_ops.audit.closure import closure_findings, load_locks
from dapo_ops.audit.collect import HostRaw
from dapo_ops.audit.report import print_report, prometheus_text
from dapo_ops.errors import UsageError
from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.stack.lock import parse_lock, platform_environment
from dapo_ops.stack.lockgen import lock_dir

SCHEMA = json.loads((Path(__file__).parents[2] / "dapo_ops" / "audit" / "schema.json").read_text())
CLOSURE = {"dist-off-lock", "dist-missing", "dist-extra", "differs-from-majority", "collect-failed"}
H = "--hash=sha256:" + "a" * 64
SMALL_LOCK = f"""\
# a small lock in uv's format
numpy==1.26.4 \\
    {H}
pyyaml==6.0.2 \\
    {H}
    # via transformers
torch==2.7.1 \\
    {H}
nvidia-nccl-cu12==2.26.2 ; platform_machine == 'x86_64' \\
    {H}
uvloop==0.21.0 ; sys_platform != 'win32' \\
    {H}
"""
ON_LOCK = {"numpy": "1.26.4", "pyyaml": "6.0.2", "torch": "2.7.1", "uvloop": "0.21.0",
           # the source installs and the bootstrap tools, which this lock does not pin: never "extra"
           "vllm": "0.11.0+empty", "vllm-ascend": "0.11.0rc1", "verl": "0.7.0", "pip": "24.2", "setuptools": "75.1.0",
           "wheel": "0.44.0"}


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


@pytest.fixture(scope="module")
def locks():
    return {"aarch64": parse_lock(SMALL_LOCK, "small.txt")}


def dists(machine="aarch64", **changes):
    installed = dict(ON_LOCK)
    for name, version in changes.items():
        name = name.replace("_", "-")
        if version is None:
            installed.pop(name)
        else:
            installed[name] = version
    return {"machine": machine, "python": "3.11.10", "dists": installed}


def raw(host, fact):
    output = fact if isinstance(fact, str) else json.dumps(fact)
    return HostRaw(host, 0, {"python_dists": (0, output)})


def closure_codes(report, host=None):
    return sorted((f.host, f.code, f.component, f.severity, f.expected, f.actual) for f in report.findings
                  if f.code in CLOSURE and (host is None or f.host == host))


def test_an_env_matching_the_lock_has_no_finding(manifest, locks):
    summary, findings, notes = closure_findings("node1", dists(), locks, manifest)
    assert (findings, notes) == ([], [])
    # the x86_64-only package is not missing on aarch64; `arm64` is the same platform
    assert summary == {"machine": "aarch64", "lock": "aarch64", "installed": 10,
                       "off_lock": 0, "missing": 0, "extra": 0}
    assert closure_findings("node1", dists("arm64"), locks, manifest)[1:] == ([], [])


def test_off_lock_missing_and_extra_name_host_package_and_versions(manifest, locks):
    report = analyze([raw("node1", dists(pyyaml="6.0.1")), raw("node2", dists(uvloop=None)),
                      raw("node3", dists(requests="2.32.3"))], manifest, locks=locks)
    assert closure_codes(report) == [
        ("node1", "dist-off-lock", "pyyaml", "error", "6.0.2", "6.0.1"),
        ("node2", "dist-missing", "uvloop", "error", "0.21.0", None),
        ("node3", "dist-extra", "requests", "warning", None, "2.32.3")]
    messages = {f.code: f.message for f in report.findings if f.code in CLOSURE}
    assert messages["dist-off-lock"] == "pyyaml is 6.0.1, the aarch64 lock pins 6.0.2"
    assert messages["dist-missing"] == "uvloop is not installed (the aarch64 lock pins 0.21.0)"
    assert messages["dist-extra"] == "requests 2.32.3 is installed but not in the aarch64 lock"
    assert {h.host: (h.closure["off_lock"], h.closure["missing"], h.closure["extra"]) for h in report.hosts} == {
        "node1": (1, 0, 0), "node2": (0, 1, 0), "node3": (0, 0, 1)}


def test_a_bootstrap_tool_the_lock_pins_is_compared(manifest):
    locks = {"aarch64": parse_lock(SMALL_LOCK + "pip==25.0\n", "small.txt")}
    _, findings, _ = closure_findings("node1", dists(), locks, manifest)
    assert [(f.code, f.component, f.expected, f.actual) for f in findings] == [("dist-off-lock", "pip", "25.0", "24.2")]


def test_no_lock_in_force_is_one_note_not_a_finding(manifest, locks):
    """x86_64 (the simulated fleet's platform) has no lock in force: audits and the launch gate are unchanged."""
    report = analyze([raw("node1", dists("x86_64", requests="2.32.3", pyyaml="5.0"))], manifest, locks=locks)
    assert closure_codes(report) == []
    assert [(n.host, n.severity, n.code, n.actual) for n in report.notes] == [
        ("node1", "info", "lock-not-in-force", "x86_64")]
    assert report.notes[0].message.startswith("no lock in force for x86_64: the closure is not audited")
    assert report.hosts[0].closure == {"machine": "x86_64", "lock": None, "installed": 11, "off_lock": 0,
                                       "missing": 0, "extra": 0}
    assert all(f.code not in CLOSURE for f in report.errors + report.warnings)


def test_the_real_aarch64_lock_parses_and_its_closure_installed_is_clean(manifest):
    """The manifest's aarch64 lock (read by analyze itself when no locks are given): a synthetic env with every
    package that applies to aarch64 / Python 3.11 at its locked version, plus the source installs, is clean."""
    locked = load_locks(manifest)["aarch64"]
    assert len(locked) > 100
    from packaging.markers import Marker

    env = platform_environment("aarch64", manifest.python_version)
    installed = {n: p.version for n, p in locked.items() if not p.markers or Marker(p.markers).evaluate(env)}
    installed.update({"vllm": "0.11.0+empty", "vllm-ascend": "0.11.0rc1", "verl": "0.7.0"})
    fact = {"machine": "aarch64", "python": f"{manifest.python_version}.10", "dists": installed}
    report = analyze([raw("node1", fact)], manifest)
    assert closure_codes(report) == [] and report.notes == []
    assert report.hosts[0].closure["lock"] == "aarch64"
    # and one package off it is found, by the same default path
    name = "transformers" if "transformers" in installed else sorted(installed)[0]
    off = analyze([raw("node1", dict(fact, dists=dict(installed, **{name: "0.0.1"})))], manifest)
    assert closure_codes(off) == [("node1", "dist-off-lock", name, "error", locked[name].version, "0.0.1")]


def test_a_lock_in_force_that_cannot_be_read_is_a_usage_error(manifest, tmp_path):
    with pytest.raises(UsageError, match="aarch64 lock .* is in force but cannot be read"):
        load_locks(manifest, tmp_path)
    platform = manifest.lock.platforms["aarch64"]
    (tmp_path / platform.file).write_text("-e ./vllm\n")
    with pytest.raises(UsageError, match="does not parse"):
        load_locks(manifest, tmp_path)
    assert lock_dir(manifest) == PROJECT_ROOT / manifest.lock.dir  # the default: the project's lock dir, wherever run
    assert load_locks(replace(manifest, lock=None)) == {}


def test_majority_rule_applies_to_every_locked_distribution(manifest, locks):
    """As for the pinned components: a host on the lock whose version differs from the fleet's majority gets a
    warning; the off-lock majority has its errors."""
    fleet = [raw("node1", dists()), raw("node2", dists(pyyaml="6.0.1")), raw("node3", dists(pyyaml="6.0.1"))]
    report = analyze(fleet, manifest, locks=locks)
    assert closure_codes(report) == [
        ("node1", "differs-from-majority", "pyyaml", "warning", "6.0.1", "6.0.2"),
        ("node2", "dist-off-lock", "pyyaml", "error", "6.0.2", "6.0.1"),
        ("node3", "dist-off-lock", "pyyaml", "error", "6.0.2", "6.0.1")]
    assert "2 of 3 aarch64 hosts run 6.0.1" in next(f.message for f in report.findings if f.host == "node1"
                                                     and f.code == "differs-from-majority")
    # fewer than three hosts: no majority; hosts with no lock in force: not audited, no majority either
    assert closure_codes(analyze(fleet[:2], manifest, locks=locks), "node1") == []
    x86 = [raw(f"node{i}", dists("x86_64", pyyaml=v)) for i, v in enumerate(("6.0.2", "6.0.1", "6.0.1"))]
    assert closure_codes(analyze(x86, manifest, locks=locks)) == []


def test_malformed_output_is_a_collect_failure_and_no_closure(manifest, locks):
    report = analyze([raw("node1", "Traceback (most recent call last):\n")], manifest, locks=locks)
    assert [(f.code, f.component) for f in report.findings if f.code in CLOSURE] == [("collect-failed", "python_dists")]
    assert report.hosts[0].closure is None and report.notes == []


def test_report_with_closure_findings_and_notes_validates(manifest, locks):
    report = analyze([raw("node1", dists(pyyaml="6.0.1", uvloop=None, requests="2.32.3")),
                      raw("node2", dists("x86_64")), HostRaw("node3", 0, unreachable="timed out")],
                     manifest, locks=locks)
    document = report.to_dict()
    jsonschema.validate(document, SCHEMA)
    assert document["schema"] == "dapo-ops/audit/v1"
    assert document["hosts"]["node1"]["closure"] == {"machine": "aarch64", "lock": "aarch64", "installed": 10,
                                                     "off_lock": 1, "missing": 1, "extra": 1}
    assert document["hosts"]["node3"]["closure"] is None
    assert [n["code"] for n in document["notes"]] == ["lock-not-in-force"]
    # notes are neither errors nor warnings
    assert document["summary"]["warnings"] == sum(f["severity"] == "warning" for f in document["findings"])
    bad = json.loads(json.dumps(document))
    bad["notes"][0]["severity"] = "warning"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_prometheus_counts_lock_drift_per_host_and_kind(manifest, locks):
    report = analyze([raw("node1", dists(pyyaml="6.0.1", uvloop=None, requests="2.32.3", idna="3.10")),
                      raw("node2", dists("x86_64"))], manifest, locks=locks)
    text = prometheus_text(report, manifest, now=1700000000)
    assert 'dapo_audit_lock_drift{host="node1",kind="off-lock"} 1' in text
    assert 'dapo_audit_lock_drift{host="node1",kind="missing"} 1' in text
    assert 'dapo_audit_lock_drift{host="node1",kind="extra"} 2' in text
    assert 'dapo_audit_lock_in_force{host="node1",machine="aarch64"} 1' in text
    assert 'dapo_audit_lock_in_force{host="node2",machine="x86_64"} 0' in text
    assert 'dapo_audit_lock_drift{host="node2"' not in text
    assert text.count("# TYPE dapo_audit_lock_drift gauge") == 1


def test_table_summarises_the_closure_per_host(manifest, locks):
    extras = {f"extra_{i:02d}": "1.0" for i in range(14)}
    report = analyze([raw("node1", dists(pyyaml="6.0.1", **extras)), raw("node2", dists("x86_64"))],
                     manifest, locks=locks)
    console = Console(file=io.StringIO(), width=200, record=True)
    print_report(report, manifest, console)
    text = console.export_text()
    assert "Python closure against the lock" in text
    row = next(line for line in text.splitlines() if line.lstrip().startswith("node1") and "aarch64" in line)
    assert row.split()[1:] == ["aarch64", "aarch64", "24", "1", "0", "14"]
    assert "none in force" in text
    assert text.count("dist-extra") == 9  # 10 closure rows for node1 (1 off-lock + 9 extra), then a count
    assert "5 more lock finding(s) (--json lists all)" in text
    assert "note: node2: no lock in force for x86_64: the closure is not audited" in text


def test_a_host_whose_inventory_names_its_lock_is_compared_with_that_lock(manifest, tmp_path):
    """dapo_stack_lock (the lock the roles installed the host from) wins over the platform's lock in force: an
    x86_64 host, whose platform has none, is audited against it; unreadable or bad, it is a one-line usage error."""
    named = tmp_path / "site-lock.txt"
    named.write_text(SMALL_LOCK)
    host = raw("node1", dists("x86_64", numpy="1.26.3"))
    host.lock = str(named)
    report = analyze([host], manifest)
    assert closure_codes(report) == [  # the lock's markers evaluated for x86_64: its nccl line applies
        ("node1", "dist-missing", "nvidia-nccl-cu12", "error", "2.26.2", None),
        ("node1", "dist-off-lock", "numpy", "error", "1.26.4", "1.26.3")]
    finding = next(f for f in report.findings if f.code == "dist-off-lock")
    assert "the x86_64 (dapo_stack_lock) lock pins 1.26.4" in finding.message
    assert report.hosts[0].closure["lock"] == "x86_64 (dapo_stack_lock)" and report.hosts[0].notes == []
    host.lock = str(tmp_path / "missing.txt")
    with pytest.raises(UsageError, match="dapo_stack_lock .*missing.txt cannot be read"):
        analyze([host], manifest)
    named.write_text("numpy>=1\n")
    host.lock = str(named)
    with pytest.raises(UsageError, match="dapo_stack_lock does not parse: .*numpy is not pinned exactly"):
        analyze([host], manifest)
