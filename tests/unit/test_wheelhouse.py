"""dapo-ops stack wheelhouse: the PEP 503 index writer, the planning (platform tags, markers, keep/download/
replace), the pip command line, bad input, and one real download of a small aarch64 subset from PyPI."""

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from dapo_ops.cli import main
from dapo_ops.errors import UsageError
from dapo_ops.stack import platform_tags as tags
from dapo_ops.stack import wheelhouse as wh
from dapo_ops.stack.index import index_pages, project_of, write_index
from dapo_ops.stack.lock import parse_lock

# Real files on PyPI (sha256 from `pip download` + sha256sum): two pure-Python wheels and one aarch64-only wheel.
SIX = "six-1.17.0-py2.py3-none-any.whl"
SIX_SHA = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
IDNA = "idna-3.10-py3-none-any.whl"
IDNA_SHA = "946d195a0d259cbba61165e88e65941f16e9b36ea6ddb97f00452bae8b1287d3"
PYYAML_AARCH64 = "pyyaml-6.0.3-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.manylinux_2_28_aarch64.whl"
PYYAML_AARCH64_SHA = "10892704fc220243f5305762e276552a0395f7beb4dbf9b14ec8fd43b57f126c"
PYYAML_X86 = "pyyaml-6.0.3-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_28_x86_64.whl"

LOCK = f"""# uv pip compile --generate-hashes (shape)
idna==3.10 \\
    --hash=sha256:{IDNA_SHA}
    # via requests
PyYAML==6.0.3 \\
    --hash=sha256:{PYYAML_AARCH64_SHA}
six==1.17.0 \\
    --hash=sha256:{SIX_SHA}
"""


def _lock(text=LOCK):
    return parse_lock(text, "test.lock")


# ------------------------------------------------------------------------------------------------ index writer


def test_index_pages_link_files_with_their_sha256():
    pages = index_pages({PYYAML_AARCH64: "a" * 64, "Foo_Bar-1.0.tar.gz": "b" * 64, SIX: "c" * 64,
                         "six-1.16.0-py2.py3-none-any.whl": "d" * 64, "notes.txt": "e" * 64})
    assert set(pages) == {"index.html", "pyyaml/index.html", "foo-bar/index.html", "six/index.html"}
    link = f'<a href="../../files/{PYYAML_AARCH64}#sha256={"a" * 64}">{PYYAML_AARCH64}</a>'
    assert link in pages["pyyaml/index.html"]
    assert f'href="../../files/Foo_Bar-1.0.tar.gz#sha256={"b" * 64}"' in pages["foo-bar/index.html"]
    assert pages["six/index.html"].count("<a ") == 2
    assert '<a href="foo-bar/">foo-bar</a>' in pages["index.html"] and "notes" not in pages["index.html"]
    assert project_of("antlr4-python3-runtime-4.9.3.tar.gz") == "antlr4-python3-runtime"


def test_write_index_hashes_the_files(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / SIX).write_bytes(b"six bytes")
    write_index(tmp_path / "simple", [files / SIX])
    digest = hashlib.sha256(b"six bytes").hexdigest()
    assert f"../../files/{SIX}#sha256={digest}" in (tmp_path / "simple/six/index.html").read_text()
    assert '<a href="six/">six</a>' in (tmp_path / "simple/index.html").read_text()


# --------------------------------------------------------------------------------------------- pure planning


def test_pip_platforms_name_every_manylinux_tag_of_the_arch():
    aarch64 = tags.pip_platforms("aarch64")
    assert aarch64[0] == "manylinux_2_28_aarch64" and "manylinux2014_aarch64" in aarch64
    assert "manylinux_2_17_aarch64" in aarch64 and "manylinux_2_16_aarch64" not in aarch64
    assert aarch64[-1] == "any" and not any("x86_64" in p for p in aarch64)
    assert {"manylinux1_x86_64", "manylinux2010_x86_64", "manylinux_2_28_x86_64"} <= set(tags.pip_platforms("x86_64"))
    with pytest.raises(UsageError, match="unknown platform 'ppc64le'"):
        tags.pip_platforms("ppc64le")


@pytest.mark.parametrize("filename, arch, ok", [
    (PYYAML_AARCH64, "aarch64", True),
    (PYYAML_AARCH64, "x86_64", False),
    (PYYAML_X86, "x86_64", True),
    (SIX, "aarch64", True),
    ("torch-2.7.1-cp311-cp311-manylinux_2_28_aarch64.whl", "aarch64", True),
    ("triton_ascend-3.2.0-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl", "aarch64", True),
    ("x-1.0-cp312-cp312-manylinux_2_28_aarch64.whl", "aarch64", False),       # another Python
    ("x-1.0-cp311-cp311-manylinux_2_31_aarch64.whl", "aarch64", False),       # newer glibc than the lock's
    ("x-1.0-cp38-abi3-manylinux2014_aarch64.whl", "aarch64", True),           # stable ABI
])
def test_target_tags(filename, arch, ok):
    file_tags = tags.file_identity(filename)[2]
    assert bool(file_tags & tags.target_tags(arch, "3.11")) is ok


def test_select_applies_markers_and_only():
    locked = _lock(LOCK + 'nvidia-nccl==2.1 ; platform_machine == "x86_64" \\\n    --hash=sha256:' + "f" * 64 + "\n")
    assert [p.name for p in tags.select(locked, "aarch64", "3.11")] == ["idna", "pyyaml", "six"]
    assert "nvidia-nccl" in [p.name for p in tags.select(locked, "x86_64", "3.11")]
    assert [p.name for p in tags.select(locked, "aarch64", "3.11", only=("PyYAML", "six"))] == ["pyyaml", "six"]
    with pytest.raises(UsageError, match="not in the lock: requests"):
        tags.select(locked, "aarch64", "3.11", only=("requests",))


def test_plan_keeps_good_files_replaces_bad_ones_and_ignores_other_platforms():
    packages = tags.select(_lock(), "aarch64", "3.11")
    present = {SIX: SIX_SHA, IDNA: "0" * 64, PYYAML_X86: PYYAML_AARCH64_SHA, "README": "1" * 64}
    steps = {s.package.name: s for s in wh.plan(packages, present, tags.target_tags("aarch64", "3.11"))}
    assert steps["six"].action == "keep" and steps["six"].good == (SIX,)
    assert steps["idna"].action == "replace" and steps["idna"].bad == (IDNA,)
    assert steps["pyyaml"].action == "download"        # the x86_64 file is not the aarch64 one


def test_pip_download_command():
    lock = _lock()
    assert wh.requirement_line(lock["six"]) == f"six==1.17.0 --hash=sha256:{SIX_SHA}"
    command = wh.pip_download_command(Path("/d"), Path("/r.txt"), "aarch64", "3.11", python="py")
    assert command[:4] == ["py", "-m", "pip", "download"]
    for option in ("--no-deps", "--require-hashes", "--only-binary=:all:"):
        assert option in command
    assert command[command.index("--python-version") + 1] == "3.11"
    assert command[command.index("--abi") + 1] == "cp311" and command[command.index("--implementation") + 1] == "cp"
    platforms = [command[i + 1] for i, arg in enumerate(command) if arg == "--platform"]
    assert platforms == tags.pip_platforms("aarch64")
    sdist = wh.pip_download_command(Path("/d"), Path("/r.txt"), "aarch64", "3.11", sdist_of="antlr4-python3-runtime")
    assert "--no-binary=antlr4-python3-runtime" in sdist and "--platform" not in sdist and "--require-hashes" in sdist


def test_pip_failure_names_the_package():
    six = _lock()["six"]
    kind, reason = wh.pip_failure(six, "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n"
                                       f"    six==1.17.0 from https://x/{SIX}:\n        Expected sha256 {'0' * 64}\n"
                                       f"             Got        {SIX_SHA}\n")
    assert kind == "hash" and reason.startswith("six==1.17.0:") and SIX_SHA in reason
    assert wh.pip_failure(six, "ERROR: No matching distribution found for six==1.17.0")[0] == "unavailable"
    assert wh.pip_failure(six, "ERROR: Could not install: disk full")[1] == "six==1.17.0: Could not install: disk full"


def test_missing_build_requirements_are_named_with_their_source():
    missing = wh.missing_build_requirements(_lock())
    assert missing["setuptools"] == ["vllm-ascend", "verl", "vllm"]
    assert "pyyaml" not in missing and "six" not in missing


def _fake_pip(outcomes):
    """A stand-in for subprocess.run: each call pops (returncode, output, {file: bytes}) and writes the files
    into the command's --dest."""
    calls = []

    def run(command, **_):
        calls.append(command)
        code, output, files = outcomes.pop(0)
        dest = Path(command[command.index("--dest") + 1])
        for name, data in files.items():
            (dest / name).write_bytes(data)
        return subprocess.CompletedProcess(command, code, "", output)
    return run, calls


def test_sdist_only_package_is_fetched_as_sdist_and_said(tmp_path):
    data = b"sdist bytes"
    lock = tmp_path / "l.txt"
    lock.write_text(f"antlr4-python3-runtime==4.9.3 --hash=sha256:{hashlib.sha256(data).hexdigest()}\n")
    run, calls = _fake_pip([(1, "ERROR: No matching distribution found for antlr4-python3-runtime==4.9.3", {}),
                            (0, "", {"antlr4-python3-runtime-4.9.3.tar.gz": data})])
    summary = wh.build(tmp_path / "wh", lock, "aarch64", "3.11", run=run)
    assert summary.sdists == ["antlr4-python3-runtime==4.9.3"]
    assert any("no wheel for aarch64" in w for w in summary.warnings)
    assert "--no-binary=antlr4-python3-runtime" in calls[1]
    assert (tmp_path / "wh/simple/antlr4-python3-runtime/index.html").exists()
    assert [p.name for p in (tmp_path / "wh").iterdir() if p.name.startswith(".")] == []
    again = wh.build(tmp_path / "wh", lock, "aarch64", "3.11", run=run)     # kept: still said, no pip call
    assert again.kept == 1 and again.sdists == ["antlr4-python3-runtime==4.9.3"] and len(calls) == 2


def test_failed_download_names_the_package_and_leaves_nothing(tmp_path, capsys):
    lock = tmp_path / "l.txt"
    lock.write_text(LOCK)
    run, _ = _fake_pip([(1, "ERROR: HTTP error 503 while getting https://files/idna", {"idna-3.10.part": b"x"})])
    with pytest.raises(wh.WheelhouseError, match=r"^idna==3.10: HTTP error 503"):
        wh.build(tmp_path / "wh", lock, "aarch64", "3.11", only=("idna",), run=run)
    assert list((tmp_path / "wh/files").iterdir()) == []
    assert [p.name for p in (tmp_path / "wh").iterdir()] == ["files"]


# ------------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("args, message", [
    (["--platform", "ppc64le"], "ppc64le"),
    (["--lock", "/nonexistent/lock.txt"], "lock file not found: /nonexistent/lock.txt"),
    (["--only", "requests"], "not in the lock: requests"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, args, message):
    lock = tmp_path / "l.txt"
    lock.write_text(LOCK)
    argv = ["stack", "wheelhouse", str(tmp_path / "wh"), "--lock", str(lock)] + args
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_unwritable_directory_and_malformed_lock_exit_2(tmp_path, capsys):
    lock = tmp_path / "l.txt"
    lock.write_text(LOCK)
    (tmp_path / "afile").write_text("")
    assert main(["stack", "wheelhouse", str(tmp_path / "afile/wh"), "--lock", str(lock)]) == 2
    assert "is not writable" in capsys.readouterr().err
    lock.write_text("six>=1\n")
    assert main(["stack", "wheelhouse", str(tmp_path / "wh"), "--lock", str(lock)]) == 2
    assert "six is not pinned exactly" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- real download (PyPI)


def _run_json(capsys, argv):
    code = main(argv + ["--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err
