"""`dapo-ops audit --from-bundle` on damaged bundles: binary, truncated and hostile outputs become collect-failed
findings; a bundle that cannot be read (huge files, a bundle.json not UTF-8 or not the schema) is one line, exit 2.
Never a traceback, never an internal error."""

import json
import random
import shutil
from pathlib import Path

import pytest

from dapo_ops.audit.collect import MAX_OUTPUT_BYTES, read_bundle
from dapo_ops.errors import UsageError
from tests.cli_runner import run_cli

PINNED = Path(__file__).parents[1] / "data" / "bundles" / "pinned"


@pytest.fixture
def bundle(tmp_path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(PINNED, target)
    return target


def audit(bundle: Path, *extra: str):
    result = run_cli("audit", "--from-bundle", bundle, *extra)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    return result


def test_binary_truncated_and_hostile_outputs_are_findings(bundle):
    node = bundle / "node"
    random.seed(13)
    (node / "board.1.txt").write_bytes(bytes(random.randrange(256) for _ in range(4096)))
    (node / "board.3.txt").write_bytes(b"\xff\xfe\x00[/] [bold]\x1b[31mred\x1b]0;title\x07\n")
    (node / "npu_smi_info.txt").write_bytes((node / "npu_smi_info.txt").read_bytes()[:300])
    (node / "python_stack.txt").write_bytes((node / "python_stack.txt").read_bytes()[:40])
    (node / "driver_version.txt").write_bytes(b"")
    (node / "board.2.rc").write_bytes(b"\xff\x00[/x]\n")
    (node / "board.0.txt").write_bytes(b"npu-smi: error\n\x1b[2J\x1b]0;pwned\x07[red]cleared[/red]\n")
    (node / "board.0.rc").write_bytes(b"1\n")
    result = audit(bundle, "--json")
    assert result.returncode == 1 and result.stderr.strip().splitlines() == ["dapo-ops: audit found 7 error(s)"]
    failed = {(f["npu"], f["message"].split("`")[1]) for f in json.loads(result.stdout)["findings"]
              if f["code"] == "collect-failed"}
    assert failed == {(1, "node/board.1.txt"), (3, "node/board.3.txt"), (None, "node/npu_smi_info.txt"),
                      (None, "node/python_stack.txt"), (None, "node/driver_version.txt"), (2, "node/board.2.txt"),
                      (0, "node/board.0.txt")}
    table = audit(bundle)   # the people's table: the output's text shown as text, escapes escaped
    assert table.returncode == 1 and "[/]" in table.stdout and "[red]" in table.stdout
    assert "\x1b" not in table.stdout and "\x07" not in table.stdout


def test_an_unreachable_reason_that_is_not_utf8_is_still_a_finding(bundle):
    (bundle / "node" / "unreachable.txt").write_bytes("connexion refusée".encode("latin-1"))
    result = audit(bundle, "--json")
    [finding] = json.loads(result.stdout)["findings"]
    assert result.returncode == 1 and finding["code"] == "unreachable"
    assert "connexion refus\ufffde" in finding["message"]


def huge(bundle: Path) -> str:
    (bundle / "node" / "npu_smi_info.txt").write_bytes(b"x" * (MAX_OUTPUT_BYTES + 1))
    return (f"audit bundle file {bundle}/node/npu_smi_info.txt: {MAX_OUTPUT_BYTES + 1} bytes, over the 4 MiB limit; "
            "not read")


def endless(bundle: Path) -> str:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    (bundle / "node" / "board.0.txt").unlink()
    (bundle / "node" / "board.0.txt").symlink_to("/dev/zero")
    return f"audit bundle file {bundle}/node/board.0.txt: not a regular file"


def meta(text: bytes):
    def write(bundle: Path) -> str:
        (bundle / "bundle.json").write_bytes(text)
        return f"{bundle}/bundle.json"
    return write


BROKEN = [
    ("huge output", huge, ""),
    ("a device for an output", endless, ""),
    ("bundle.json latin-1", meta('{"schema": "dapo-ops/audit-bundle/v1", "hosts": {"hôte": {}}}'.encode("latin-1")),
     ":1:52: not UTF-8: byte 0xF4 at byte offset 51"),
    ("bundle.json not JSON", meta(b'{"schema": "dapo-ops/audit-bundle/v1",\n "hosts": {]}'), ":2:12: Expecting"),
    ("bundle.json a list", meta(b"[1, 2]"), ": expected a JSON object, got list"),
    ("bundle.json hosts a list", meta(b'{"schema": "dapo-ops/audit-bundle/v1", "hosts": [1]}'),
     ": hosts: expected an object of host objects"),
    ("npus_per_node text", meta(b'{"schema": "dapo-ops/audit-bundle/v1", "hosts": {"node": {"npus_per_node": "4"}}}'),
     ": hosts.node.npus_per_node: expected a whole number, got '4'"),
    ("duplicate key", meta(b'{"schema": "dapo-ops/audit-bundle/v1", "schema": "x"}'), ": duplicate key 'schema'"),
]


@pytest.mark.parametrize("label, damage, message", BROKEN, ids=[b[0] for b in BROKEN])
def test_an_unreadable_bundle_is_one_line_and_exit_2(bundle, label, damage, message):
    expected = damage(bundle) + message
    result = audit(bundle)
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1 and expected in result.stderr, result.stderr
    with pytest.raises(UsageError):
        read_bundle(bundle)
