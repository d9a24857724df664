"""`dapo-ops stack artifacts DIR`: a site's vendor files checked against the pin and their digests recorded in the
file the inventory names (dapo_ops/stack/artifacts.py)."""

import dataclasses
import hashlib
import json
import subprocess

import pytest

from dapo_ops.errors import UsageError
from dapo_ops.manifest import load_manifest
from dapo_ops.stack import artifacts
from tests.cli_runner import run_cli

MANIFEST = load_manifest()
DRIVER = MANIFEST.artifact("driver")


def vendor_dir(tmp_path, skip=()):
    """The six pinned installers (a few bytes each) as a site downloads them, and a file of the site's own."""
    directory = tmp_path / "vendor"
    directory.mkdir()
    for key, artifact in MANIFEST.artifacts.items():
        if key not in skip:
            (directory / artifact.file).write_bytes(f"installer {key}\n".encode())
    (directory / "README.txt").write_text("downloaded 2025-11-02 from the vendor's support site\n")
    return directory


def test_the_digests_are_written_in_sha256sums_own_format(tmp_path):
    directory = vendor_dir(tmp_path)
    result = run_cli("stack", "artifacts", directory, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    written = directory / artifacts.DIGEST_FILE_NAME
    assert document["written"] == str(written) and document["problems"] == []
    check = subprocess.run(["sha256sum", "--check", "--strict", written.name], cwd=directory, capture_output=True,
                           text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == len(MANIFEST.artifacts), check.stdout
    recorded = artifacts.read_digest_file(written)
    assert recorded[DRIVER.file] == hashlib.sha256(b"installer driver\n").hexdigest()
    assert artifacts.pinned_digests(MANIFEST, recorded).keys() == MANIFEST.artifacts.keys()
    assert "set dapo_artifact_digest_file: " + str(written) in result.stderr


@pytest.mark.parametrize("other", [
    "Ascend-hdk-910b-npu-driver_24.1.0_linux-aarch64.run",         # another version
    "Ascend-hdk-910b-npu-driver_25.0.rc1.1_linux-x86_64.run",      # another platform
    "ascend-cann-toolkit_8.3.rc1_linux-aarch64.run",                 # the pinned one, spelled otherwise
    "Miniconda3-py311_25.1.1-2-Linux-aarch64.sh",
])
def test_another_version_or_platform_is_refused_and_nothing_is_written(tmp_path, other):
    directory = vendor_dir(tmp_path)
    (directory / other).write_bytes(b"not the pinned one\n")
    result = run_cli("stack", "artifacts", directory)
    assert result.returncode == 1
    assert f"{other} is not the pinned " in result.stdout + result.stderr
    assert "nothing was written" in result.stderr
    assert not (directory / artifacts.DIGEST_FILE_NAME).exists()


def test_a_missing_installer_is_named_and_nothing_is_written(tmp_path):
    directory = vendor_dir(tmp_path, skip=("cann_nnal",))
    result = run_cli("stack", "artifacts", directory, "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["problems"] == [f"{MANIFEST.artifact('cann_nnal').file}: missing"]
    assert not (directory / artifacts.DIGEST_FILE_NAME).exists()


def test_a_file_the_manifest_knows_another_digest_of_is_refused(tmp_path):
    directory = vendor_dir(tmp_path)
    pinned = dataclasses.replace(MANIFEST, artifacts={**MANIFEST.artifacts,
                                                      "driver": dataclasses.replace(DRIVER, sha256="0" * 64)})
    checked, refusals = artifacts.check_directory(pinned, directory)
    assert refusals == []
    driver = next(c for c in checked if c.key == "driver")
    sha = hashlib.sha256(b"installer driver\n").hexdigest()
    assert driver.problem == f"sha256 {sha}, but the stack manifest pins {'0' * 64}: not the vendor's file"


def test_no_directory_is_bad_input(tmp_path):
    result = run_cli("stack", "artifacts", tmp_path / "nowhere")
    assert result.returncode == 2 and "nowhere is not a directory" in result.stderr


@pytest.mark.parametrize("text, error", [
    ("abc  file.run\n", ":1: not a sha256sum line"),
    (f"{'a' * 64}  x.run\n{'b' * 64}  x.run\n", ":2: x.run has two different digests"),
    (f"{'a' * 64}  ../etc/passwd\n", ":1: not a sha256sum line"),
])
def test_a_digest_file_that_does_not_parse_names_the_line(text, error):
    with pytest.raises(UsageError, match=error):
        artifacts.parse_digest_file(text, "site.sha256")


def test_a_digest_file_is_read_as_sha256sum_writes_it():
    text = (f"# recorded by the site\n\n{'A' * 64}  {DRIVER.file}\n{'b' * 64} *Miniconda3.sh\r\n"
            f"{'c' * 64}  name with spaces.run\n")
    assert artifacts.parse_digest_file(text, "s") == {DRIVER.file: "a" * 64, "Miniconda3.sh": "b" * 64,
                                                      "name with spaces.run": "c" * 64}


def test_the_look_alikes_of_every_pinned_installer():
    for artifact in MANIFEST.artifacts.values():
        assert artifacts.look_alike(MANIFEST, artifact.file) is None
        other = artifact.file.replace(artifact.version, "0.0.1")
        assert artifacts.look_alike(MANIFEST, other) == artifact
    assert artifacts.look_alike(MANIFEST, "README.txt") is None
    assert artifacts.look_alike(MANIFEST, "Ascend-docker-runtime_6.0.0_linux-aarch64.run") is None


def test_a_sources_bundle_is_named_by_its_repository_and_pinned_tag():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[2] / "filter_plugins"))
    from dapo_artifacts import source_bundle

    names = {key: source_bundle({"repo": s.repo, "ref": s.ref}) for key, s in MANIFEST.sources.items()}
    assert names["vllm_ascend"] == f"vllm-ascend-{MANIFEST.sources['vllm_ascend'].ref}.bundle"
    assert len(set(names.values())) == len(names)


def test_an_installer_that_cannot_be_read_is_named_and_nothing_is_written(tmp_path, monkeypatch):
    directory = vendor_dir(tmp_path)

    def unreadable(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(artifacts, "sha256_of", unreadable)
    result = run_cli("stack", "artifacts", directory)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{DRIVER.file}: cannot be read: Permission denied" in result.stdout + result.stderr
    assert not (directory / artifacts.DIGEST_FILE_NAME).exists()
