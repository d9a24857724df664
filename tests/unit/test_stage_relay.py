"""The stage relay as the nodes run it (a real python3 subprocess per hop; the next hop is started the way ssh
would start it, with its stdin and stdout as pipes): frames written where addressed, passed on, checked by sha256
before they get their name, and no file under its final name from a stream that breaks off."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from dapo_ops.stage import relay
from dapo_ops.stage.stream import parse_event

RELAY = Path(relay.__file__)


def _entry(tmp: Path, name: str, data: bytes, to: list[str], target_dir: Path) -> dict:
    source = tmp / "src" / name
    source.parent.mkdir(exist_ok=True)
    source.write_bytes(data)
    return {"source": str(source), "target": str(target_dir / name), "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(), "mode": 0o644, "to": to}


def _stream(entries: list[dict], end: bool = True) -> bytes:
    chunks: list[bytes] = []
    relay.write_frames(entries, chunks.append)
    data = b"".join(chunks)
    return data if end else data[: -len(relay.END)]


def _chain(tmp: Path, names: list[str]) -> list[str]:
    """hop files for a chain of local hops; returns the first hop's command."""
    commands: list[list[str] | None] = [None] * len(names)
    for index in reversed(range(len(names))):
        hop = tmp / f"hop-{names[index]}.json"
        nxt = commands[index + 1] if index + 1 < len(names) else None
        hop.write_text(json.dumps({"name": names[index], "next": nxt}))
        commands[index] = [sys.executable, str(RELAY), "recv", str(hop)]
    return commands[0]


def _run(command: list[str], stream: bytes) -> tuple[int, list[dict]]:
    done = subprocess.run(command, input=stream, capture_output=True, timeout=60)
    events = [e for e in (parse_event(line) for line in done.stdout.decode().splitlines()) if e]
    return done.returncode, events


def test_a_chain_writes_each_file_where_addressed_and_passes_every_frame_on(tmp_path):
    # one machine stands for three nodes: each file is addressed to one hop, at its own target path
    t = tmp_path / "t"
    entries = [_entry(tmp_path, "for-a", os.urandom(3 * relay.CHUNK + 17), ["a"], t),
               _entry(tmp_path, "for-b", b"{}\n", ["b"], t),
               _entry(tmp_path, "for-c", os.urandom(relay.CHUNK // 3), ["c"], t / "deeper")]
    code, events = _run(_chain(tmp_path, ["a", "b", "c"]), _stream(entries))
    assert code == 0
    done = {e["node"]: e for e in events if e["event"] == "done"}
    assert set(done) == {"a", "b", "c"} and all(d["complete"] for d in done.values())
    assert [done[n]["files"] for n in "abc"] == [1, 1, 1]
    assert done["a"]["bytes"] == entries[0]["size"] and done["c"]["bytes"] == entries[2]["size"]
    for entry in entries:
        target = Path(entry["target"])
        assert target.read_bytes() == Path(entry["source"]).read_bytes()
        assert target.stat().st_mode & 0o777 == 0o644
    assert not [p for p in t.rglob("*") if p.name.endswith(relay.PARTIAL_SUFFIX)]


def test_a_file_whose_bytes_do_not_hash_to_its_header_is_not_given_its_name(tmp_path):
    entry = _entry(tmp_path, "shard", b"x" * 1000, ["a"], tmp_path / "t")
    entry["sha256"] = hashlib.sha256(b"y" * 1000).hexdigest()
    code, events = _run(_chain(tmp_path, ["a"]), _stream([entry]))
    assert code == 1
    assert not (tmp_path / "t" / "shard").exists() and not list((tmp_path / "t").iterdir())
    file_events = [e for e in events if e["event"] == "file"]
    assert file_events and not file_events[0]["ok"] and "expected" in file_events[0]["why"]


def test_a_stream_that_breaks_off_leaves_no_file_under_its_name_and_keeps_the_old_one(tmp_path):
    target_dir = tmp_path / "t"
    target_dir.mkdir()
    (target_dir / "shard").write_bytes(b"old")
    entry = _entry(tmp_path, "shard", os.urandom(2 * relay.CHUNK), ["a"], target_dir)
    cut = _stream([entry], end=False)[: relay.CHUNK]
    code, events = _run(_chain(tmp_path, ["a", "b"]), cut)
    assert code == 1
    assert (target_dir / "shard").read_bytes() == b"old"
    assert [p.name for p in target_dir.iterdir()] == ["shard"]
    done = {e["node"]: e for e in events if e["event"] == "done"}
    assert not done["a"]["complete"] and not done["b"]["complete"]


def test_hash_reports_each_path(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    (tmp_path / "d").mkdir()
    out = subprocess.run([sys.executable, str(RELAY), "hash"], capture_output=True, timeout=30, text=True,
                         input=json.dumps([str(tmp_path / "f"), str(tmp_path / "nope"), str(tmp_path / "d")]))
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert lines[0] == {"path": str(tmp_path / "f"), "size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}
    assert lines[1]["missing"] and lines[2]["missing"]


def test_send_on_a_source_node_writes_the_stream_the_controller_writes(tmp_path):
    entry = _entry(tmp_path, "data.parquet", os.urandom(5000), ["a"], tmp_path / "t")
    out = subprocess.run([sys.executable, str(RELAY), "send"], input=json.dumps([entry]).encode(),
                         capture_output=True, timeout=30)
    assert out.returncode == 0 and out.stdout == _stream([entry])


def test_list_answers_with_node_files_definition(tmp_path):
    (tmp_path / "run").mkdir()
    for name in ("relay.py",):
        (tmp_path / "run" / name).write_bytes(RELAY.read_bytes())
    from dapo_ops.job import node_files

    (tmp_path / "run" / "node_files.py").write_bytes(Path(node_files.__file__).read_bytes())
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "pytorch_model.bin").write_bytes(b"x")
    out = subprocess.run([sys.executable, str(tmp_path / "run" / "relay.py"), "list", str(model)],
                         capture_output=True, timeout=30, text=True)
    answer = json.loads(out.stdout)
    assert answer["files"] == ["config.json"] and answer["left_out"] == ["pytorch_model.bin"]
    assert any("holds no weights" in p for p in answer["problems"])


def _hop(tmp_path, name: str, allowed: dict | None, nxt: list[str] | None = None) -> list[str]:
    hop = tmp_path / f"hop-{name}.json"
    hop.write_text(json.dumps({"name": name, "next": nxt, "allowed": allowed}))
    return [sys.executable, str(RELAY), "recv", str(hop)]


def test_a_hop_writes_only_what_its_own_hop_file_lists_whatever_the_stream_says(tmp_path):
    listed = _entry(tmp_path, "listed", b"ok\n", ["a"], tmp_path / "t")
    other = _entry(tmp_path, "planted", b"ssh-ed25519 AAAA attacker\n", ["a"], tmp_path / "t")
    code, events = _run(_hop(tmp_path, "a", {listed["target"]: listed["sha256"]}), _stream([listed, other]))
    assert code == 1
    assert Path(listed["target"]).read_bytes() == b"ok\n" and not Path(other["target"]).exists()
    refused = [e for e in events if e["event"] == "file" and not e["ok"]]
    assert [e["target"] for e in refused] == [other["target"]] and "not a file this run stages" in refused[0]["why"]


def test_a_file_that_cannot_be_written_fails_alone_and_the_stream_goes_on_to_the_next_node(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "blocked").write_text("a file where a directory is needed")
    bad = _entry(tmp_path, "x", os.urandom(5000), ["a"], tmp_path / "t" / "blocked")
    good = _entry(tmp_path, "y", os.urandom(5000), ["a", "b"], tmp_path / "u")
    later = _entry(tmp_path, "z", os.urandom(5000), ["b"], tmp_path / "v")
    b = _hop(tmp_path, "b", None)
    code, events = _run(_hop(tmp_path, "a", None, b), _stream([bad, good, later]))
    done = {e["node"]: e for e in events if e["event"] == "done"}
    assert done["a"]["complete"] and done["a"]["failed"] == [bad["target"]] and done["a"]["files"] == 1
    assert done["b"]["complete"] and done["b"]["files"] == 2 and not done["b"]["failed"]
    assert Path(later["target"]).read_bytes() == Path(later["source"]).read_bytes()


def test_two_relays_writing_one_shared_path_both_leave_it_whole(tmp_path):
    """Two nodes of a directory only some of them share: both write the same target at once."""
    entry = _entry(tmp_path, "shard", os.urandom(4 * relay.CHUNK), ["a"], tmp_path / "shared")
    stream = _stream([entry])
    procs = [subprocess.Popen(_hop(tmp_path, "a", None), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
             for _ in range(2)]
    for proc in procs:   # interleave the two streams a chunk at a time
        proc.stdin.write(stream[: relay.CHUNK])
    for proc in procs:
        proc.stdin.write(stream[relay.CHUNK:])
        proc.stdin.close()
    assert [proc.wait(60) for proc in procs] == [0, 0]
    assert Path(entry["target"]).read_bytes() == Path(entry["source"]).read_bytes()
    assert [p.name for p in (tmp_path / "shared").iterdir()] == ["shard"]
