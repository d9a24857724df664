"""`dapo-ops doctor RUN`'s collection (issue 16): the pure parts. The SSH edge runs on the simulated fleet only."""

import io
import json
import tarfile
from datetime import timedelta

import pytest

from dapo_ops.doctor.bundle import parse_meta
from dapo_ops.doctor.collect import RAY_LOGS, bundle_description, extract, node_meta, remote_script, skew
from dapo_ops.job.render import RAY_TEMP_DIR


def test_the_node_script_reads_ray_s_session_logs_plogs_and_dmesg():
    script = remote_script(90)
    assert RAY_LOGS == f"{RAY_TEMP_DIR}/session_latest/logs" and RAY_LOGS in script
    for wanted in ("ASCEND_PROCESS_LOG_PATH", "/root/ascend/log", "-mmin -90", "dmesg >", "/proc/stat", "date +%z",
                   "tar czf", 'rm -rf "$stage"'):
        assert wanted in script, wanted


def test_node_meta_and_skew_round_trip_through_bundle_json(tmp_path):
    assert skew(100.0, 97.5, 101.0) == pytest.approx(-3.0)
    meta = node_meta({"utc_offset": "+0800", "btime": 1762041600}, address="10.78.0.12", npus=16, skew_s=-3.0)
    assert meta == {"address": "10.78.0.12", "npus": 16, "utc_offset": "+0800", "skew_s": -3.0,
                    "boot_time": "2025-11-02T00:00:00+00:00"}
    description = bundle_description("run-1", {"node2": meta}, {"node3": "node3: unreachable"})
    run, nodes = parse_meta(json.loads(json.dumps(description)), tmp_path / "bundle.json")
    assert run == "run-1"
    clock = nodes["node2"].clock
    assert (clock.utc_offset, clock.skew) == (timedelta(hours=8), timedelta(seconds=-3))
    assert nodes["node2"].npus == 16 and nodes["node2"].address == "10.78.0.12"


def _tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_extract_unpacks_below_the_node_only(tmp_path):
    good = tmp_path / "good.tgz"
    _tar(good, {"./ray/raylet.out": b"x\n", "./dmesg.txt": b"y\n"})
    extract(good, tmp_path / "node1")
    assert (tmp_path / "node1" / "ray" / "raylet.out").read_text() == "x\n"
    evil = tmp_path / "evil.tgz"
    _tar(evil, {"../../escaped.txt": b"z"})
    with pytest.raises(tarfile.TarError):
        extract(evil, tmp_path / "node2")
    assert not (tmp_path / "escaped.txt").exists()


def test_the_node_script_packs_a_private_tar_and_follows_no_link(tmp_path):
    """Issue 26 (low): the logs are root's: the tar is 0600, and a link in Ray's log directory (to /etc/shadow,
    say) is neither followed nor packed."""
    import os
    import stat
    import subprocess

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "raylet.out").write_text("a ray log line\n")
    (logs / "secret").symlink_to("/etc/hostname")
    (logs / "dir-link").symlink_to(tmp_path)
    script = remote_script(5).replace(RAY_LOGS, str(logs))
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, ASCEND_PROCESS_LOG_PATH=str(tmp_path / "none")))
    archive = result.stdout.strip().splitlines()[-1]
    try:
        assert stat.S_IMODE(os.stat(archive).st_mode) == 0o600
        with tarfile.open(archive) as tar:
            members = {m.name: m for m in tar.getmembers()}
        assert "./ray/raylet.out" in members
        assert not any(m.issym() or m.islnk() for m in members.values()), sorted(members)
        assert not any(name.startswith(("./ray/secret", "./ray/dir-link")) for name in members)
    finally:
        os.unlink(archive)
