"""What `dapo-ops stage` sends where (dapo_ops/stage/plan.py), with the two parsers around it that read the nodes'
answers: the relays' report lines (stage/stream.py parse_event). Pure: the
hash lines come from the relay's own file_digest on real files."""

import hashlib
import json

import pytest

from dapo_ops.errors import ParseError, UsageError
from dapo_ops.stage import relay
from dapo_ops.stage.plan import (Digest, Placement, SourceFile, check_targets, human_bytes, parse_hashes, plan,
                                 target_dirs, under)
from dapo_ops.stage.stream import parse_event

NODES = ["node1", "node2", "node3"]


def source_file(target: str, data: bytes, what: str = "model") -> SourceFile:
    return SourceFile("/src" + target, target, len(data), hashlib.sha256(data).hexdigest(), what)


def have(*files: SourceFile) -> dict[str, Digest]:
    """A node's listing in which every given file is in place."""
    return {f.target: Digest(f.size, f.sha256) for f in files}


CONFIG = source_file("/data/model/config.json", b'{"model_type": "qwen3"}')
SHARD = source_file("/data/model/model-00001-of-00001.safetensors", b"\0" * 64)
TRAIN = source_file("/data/dapo/train.parquet", b"PAR1 train PAR1", "data.train_files")
FILES = [CONFIG, SHARD, TRAIN]


# ------------------------------------------------------------------------------------------------ parse_hashes

def test_parse_hashes_reads_the_relay_s_digest_missing_and_error_lines(tmp_path):
    present = tmp_path / "config.json"
    present.write_bytes(b"{}")
    lines = [json.dumps(relay.file_digest(str(present))), "",
             json.dumps(relay.file_digest(str(tmp_path / "absent"))),
             json.dumps({"path": "/data/model/locked", "error": "Permission denied"})]
    digests = parse_hashes("\n".join(lines) + "\n")
    assert digests == {str(present): Digest(2, hashlib.sha256(b"{}").hexdigest()),
                       str(tmp_path / "absent"): Digest(),
                       "/data/model/locked": Digest(error="Permission denied")}


@pytest.mark.parametrize("bad", ["not json", '{"size": 3, "sha256": "ab"}', '["/data/x"]', "null",
                                 '{"path": "/data/x", "sha256": "ab"}',
                                 '{"path": "/data/x", "size": "big", "sha256": "a"}'])
def test_parse_hashes_refuses_a_malformed_line_naming_its_number_and_text(bad):
    good = json.dumps({"path": "/data/a", "size": 1, "sha256": "00"})
    with pytest.raises(ParseError) as caught:
        parse_hashes(f"{good}\n{bad}\n{good}\n")
    assert caught.value.line_no == 2 and caught.value.line == bad
    assert "relay.py hash" in str(caught.value) and "line 2" in str(caught.value)


# ------------------------------------------------------------------------------------------------ plan

def test_a_copy_of_the_same_size_with_another_sha256_is_needed():
    stale = Digest(SHARD.size, hashlib.sha256(b"\1" * 64).hexdigest())
    listings = {"node1": have(*FILES), "node2": {**have(*FILES), SHARD.target: stale}}
    result = plan(FILES, Placement(NODES[:2]), listings)
    assert result.needs == {"node1": [], "node2": [SHARD]}
    assert result.receivers == ["node2"] and result.unreadable == {}


def test_a_file_absent_from_the_listing_is_needed_and_a_node_without_a_listing_needs_everything():
    listings = {"node1": have(CONFIG, TRAIN), "node2": {**have(CONFIG, TRAIN), SHARD.target: Digest()}}
    result = plan(FILES, Placement(NODES), listings)
    assert result.needs == {"node1": [SHARD], "node2": [SHARD], "node3": FILES}
    assert result.receivers == NODES


def test_an_unreadable_copy_is_reported_and_still_needed():
    listings = {"node1": {**have(CONFIG, TRAIN), SHARD.target: Digest(error="Permission denied")}}
    result = plan(FILES, Placement(["node1"]), listings)
    assert result.unreadable == {"node1": [f"{SHARD.target}: Permission denied"]}
    assert result.needs["node1"] == [SHARD]


@pytest.mark.parametrize("path, root, inside", [
    ("/data/model/config.json", "/data/model", True),
    ("/data/model/config.json", "/data/model/", True),
    ("/data/model", "/data/model", True),
    ("/data/m", "/data/model", False),
    ("/data/model2/config.json", "/data/model", False),
    ("/data/modelx", "/data/model", False),
    ("/data", "/data/model", False),
    ("/anything/at/all", "/", True),
    ("/", "/", True),
])
def test_under_matches_whole_path_segments_only(path, root, inside):
    assert under(path, root) is inside


def test_a_shared_root_gives_the_files_under_it_to_the_first_node_only():
    placement = Placement(NODES, ("/data/model",))
    assert placement.holders(CONFIG.target) == ["node1"]
    assert placement.holders(TRAIN.target) == NODES
    assert placement.targets(FILES, "node1") == FILES
    assert placement.targets(FILES, "node2") == [TRAIN]
    result = plan(FILES, placement, {})
    assert result.needs == {"node1": FILES, "node2": [TRAIN], "node3": [TRAIN]}
    # a root that only shares a prefix with the target's directory is not its root
    assert Placement(NODES, ("/data/mod",)).holders(CONFIG.target) == NODES
    assert Placement(NODES, ("/",)).targets(FILES, "node3") == []


def test_frames_address_each_file_to_exactly_the_nodes_that_lack_it_in_the_source_s_order():
    listings = {"node1": have(CONFIG, SHARD), "node2": have(TRAIN), "node3": have(CONFIG, SHARD, TRAIN)}
    result = plan(FILES, Placement(NODES), listings)
    frames = result.frames()
    assert [(f["target"], f["to"]) for f in frames] == [(CONFIG.target, ["node2"]), (SHARD.target, ["node2"]),
                                                        (TRAIN.target, ["node1"])]
    assert frames[1] == {"source": SHARD.source, "target": SHARD.target, "size": SHARD.size, "sha256": SHARD.sha256,
                         "mode": 0o644, "to": ["node2"]}
    assert result.to_send == FILES and result.receivers == ["node1", "node2"]
    assert all(relay.header(f).endswith(b"\n") for f in frames)     # the relay takes them as frame headers


def test_the_source_s_order_is_kept_whatever_order_the_nodes_lack_the_files_in():
    listings = {"node1": have(CONFIG), "node2": have(SHARD)}
    frames = plan(FILES, Placement(NODES[:2]), listings).frames()
    assert [f["target"] for f in frames] == [f.target for f in FILES]
    assert [f["to"] for f in frames] == [["node2"], ["node1"], ["node1", "node2"]]


def test_nothing_is_sent_when_every_copy_is_in_place():
    result = plan(FILES, Placement(NODES), {n: have(*FILES) for n in NODES})
    assert result.to_send == [] and result.frames() == [] and result.receivers == []
    assert all(result.bytes_for(n) == 0 for n in NODES)


def test_bytes_for_sums_the_sizes_a_node_lacks():
    result = plan(FILES, Placement(NODES), {"node1": have(CONFIG), "node2": have(*FILES)})
    assert result.bytes_for("node1") == SHARD.size + TRAIN.size
    assert result.bytes_for("node2") == 0
    assert result.bytes_for("node3") == CONFIG.size + SHARD.size + TRAIN.size
    assert result.bytes_for("not-a-node") == 0


# ------------------------------------------------------------------------------------------------ targets

@pytest.mark.parametrize("target", ["data/model/config.json", "/data/../etc/config.json", "/data//model/config.json",
                                    "/data/./model/config.json", "/data/model/", ""])
def test_check_targets_refuses_a_relative_or_not_normal_target(target):
    with pytest.raises(UsageError) as caught:
        check_targets([CONFIG, SourceFile("/src/x", target, 1, "00", "data.val_files")])
    assert caught.value.exit_code == 2
    assert "absolute and normal" in str(caught.value) and "data.val_files" in str(caught.value)


def test_check_targets_refuses_a_target_with_a_leading_double_slash():
    # POSIX normpath keeps exactly two leading slashes ("//data/x" stays "//data/x"), so this passes the normal-path
    # check although the message promises "no '//'"; it is the same file as /data/x on Linux, which lets two sources
    # land on one file and a shared root (/data) miss it.
    try:
        check_targets([SourceFile("/src/x", "//data/dapo/train.parquet", 1, "00", "data.train_files")])
        refused = False
    except UsageError:
        refused = True
    assert refused, "'//data/dapo/train.parquet' passes as absolute and normal"


def test_check_targets_refuses_one_target_from_two_sources_and_allows_one_from_the_same_source():
    twin = SourceFile("/elsewhere/train.parquet", TRAIN.target, TRAIN.size, TRAIN.sha256, "data.val_files")
    with pytest.raises(UsageError) as caught:
        check_targets([*FILES, twin])
    assert caught.value.exit_code == 2
    assert TRAIN.target in str(caught.value) and TRAIN.source in str(caught.value) and twin.source in str(caught.value)
    check_targets([*FILES, SourceFile(TRAIN.source, TRAIN.target, TRAIN.size, TRAIN.sha256, "data.val_files")])


def test_target_dirs_are_the_distinct_directories_sorted():
    val = source_file("/data/dapo/val.parquet", b"v", "data.val_files")
    assert target_dirs([TRAIN, CONFIG, SHARD, val]) == ["/data/dapo", "/data/model"]
    assert target_dirs([]) == []


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"),
                                     (5 << 20, "5.0 MiB"), (int(57.3 * (1 << 30)), "57.3 GiB"),
                                     (3 << 40, "3.0 TiB"), (2048 << 40, "2048.0 TiB")])
def test_human_bytes(n, text):
    assert human_bytes(n) == text


# ------------------------------------------------------------------------------------------------ report lines

def test_parse_event_reads_a_prefixed_json_object_with_an_event_name():
    line = relay.EVENT_PREFIX + json.dumps({"event": "done", "node": "node2", "bytes": 10}) + "\n"
    assert parse_event(line) == {"event": "done", "node": "node2", "bytes": 10}


@pytest.mark.parametrize("line", [
    json.dumps({"event": "done", "node": "node2"}),                      # no prefix
    " " + relay.EVENT_PREFIX + json.dumps({"event": "done"}),           # the prefix must start the line
    relay.EVENT_PREFIX + '{"event": "done", ',                           # bad JSON
    relay.EVENT_PREFIX + "[1, 2]", relay.EVENT_PREFIX + '"done"', relay.EVENT_PREFIX + "null",   # not an object
    relay.EVENT_PREFIX + json.dumps({"node": "node2"}), relay.EVENT_PREFIX + json.dumps({"event": 3}),
    "",
])
def test_parse_event_gives_none_for_anything_else(line):
    assert parse_event(line) is None
