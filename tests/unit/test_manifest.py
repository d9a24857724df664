import re
import subprocess
from pathlib import Path

import pytest
import yaml

from dapo_ops.errors import ManifestError
from dapo_ops.manifest import load_manifest, parse_manifest
from dapo_ops.paths import PROJECT_ROOT, STACK_MANIFEST


@pytest.fixture(scope="module")
def manifest():
    return load_manifest()


def test_pins_the_stack(manifest):
    assert manifest.artifact("driver").file.endswith(f"_{manifest.artifact('driver').version}_linux-aarch64.run")
    assert manifest.python_version == "3.11"
    assert manifest.packages["numpy"] == "<2"
    assert manifest.pinned_version("torch") == manifest.pinned_version("torch_npu")
    assert manifest.source("vllm").extra["build_env"] == {"VLLM_TARGET_DEVICE": "empty"}
    assert manifest.source("vllm").dir != manifest.source("vllm_ascend").dir


def test_pinned_driver_firmware_toolkit_agree(manifest):
    report = manifest.pinned_compatibility()
    assert report.compatible, report.reasons()
    assert len(report.checked) == 3


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema=2), "unsupported schema"),
    (lambda d: d["artifacts"].pop("firmware"), "artifacts.firmware is missing"),
    (lambda d: d["artifacts"]["driver"].update(sha256="abc"), "not a sha256"),
    (lambda d: d["artifacts"]["driver"].pop("sha256"), r"driver.sha256 is missing \(null where it is not known\)"),
    (lambda d: d["python"].pop("packages"), "python.packages is missing"),
    (lambda d: d["sources"]["verl"].pop("ref"), "sources.verl.ref is missing"),
])
def test_malformed_manifest(mutate, message):
    data = yaml.safe_load(STACK_MANIFEST.read_text())
    mutate(data)
    with pytest.raises(ManifestError, match=message):
        parse_manifest(data)


def test_unreadable_manifest(tmp_path):
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("schema: [1\n")
    with pytest.raises(ManifestError, match="not valid YAML"):
        load_manifest(bad)


def test_no_pinned_version_is_repeated_outside_the_manifest(manifest):
    """The manifest is the single truth: code, roles, templates and inventories never spell a pinned version.

    A citation of what was checked upstream (the tag followed by the file it names, e.g. "verl v0.7.0
    verl/utils/tracking.py") is a reference, not a pin: it stays true when the pin moves."""
    versions = {a.version for a in manifest.artifacts.values()}
    versions |= {manifest.pinned_version(p) for p in ("torch", "torch_npu", "ray", "torchvision", "triton_ascend")}
    versions |= {s.ref for s in manifest.sources.values()} | {s.version for s in manifest.sources.values()}
    citation = r"(?!,?\s+(?:#\s*)?`?[\w.-]+(?:/[\w.-]+)+\.\w+)"
    patterns = {v: re.compile(rf"(?<![\w.]){re.escape(v)}(?![\w])(?!\.\d){citation}") for v in versions}
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in tracked:
        path = Path(PROJECT_ROOT, name)
        if name == "stack/manifest.yml" or name.startswith("tests/") or not path.is_file():
            continue
        if path.suffix not in (".py", ".yml", ".yaml", ".j2", ".sh", ".cfg", ".toml", ".ini") and name != ".ci/run":
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{name}: {v}" for v, pattern in patterns.items() if pattern.search(text)]
    assert not offenders, offenders


def test_each_ascend_artifact_names_the_key_that_holds_its_version():
    manifest = load_manifest()
    for key in ("driver", "firmware", "cann_toolkit", "cann_kernels", "cann_nnal"):
        artifact = manifest.artifact(key)
        assert artifact.installed_version(artifact.version_info) == artifact.version, key
    assert manifest.artifact("cann_kernels").installed_version({"Version": "8.3.0.1.235"}) is None
    assert manifest.pins()["cann_kernels"] == manifest.artifact("cann_kernels").version
    assert manifest.pins()["torch_npu"] == manifest.pinned_version("torch_npu")


def test_a_version_key_missing_from_the_version_info_is_refused():
    import copy

    data = yaml.safe_load(STACK_MANIFEST.read_text())
    broken = copy.deepcopy(data)
    broken["artifacts"]["cann_kernels"]["version_key"] = "Version_dir"
    with pytest.raises(ManifestError, match="version_key 'Version_dir' is not a key of its version_info"):
        parse_manifest(broken, "m.yml")
    del data["artifacts"]["driver"]["version_key"]
    with pytest.raises(ManifestError, match="artifacts.driver has a version_file but no version_key"):
        parse_manifest(data, "m.yml")


def test_a_digest_is_recorded_or_null_never_made_up(manifest):
    """The manifest records a vendor file's sha256 only where it was read off the real file; none was here."""
    data = yaml.safe_load(STACK_MANIFEST.read_text())
    data["artifacts"]["driver"]["sha256"] = "a" * 64
    assert parse_manifest(data).artifact("driver").sha256 == "a" * 64
    assert all(a.sha256 is None for a in manifest.artifacts.values())
