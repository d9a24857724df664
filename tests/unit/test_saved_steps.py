"""Which saved steps are complete over a run's nodes (dapo_ops/launch/saved_steps.py), the free space launch checks
(node_checks.parse_space), and what a resume refuses (launch/resume.py): pure, on listings as the nodes print them."""

import subprocess
from pathlib import Path

import pytest

from dapo_ops.errors import ParseError, UsageError
from dapo_ops.launch.node_checks import parse_space, space_command
from dapo_ops.launch.records import RunRecord
from dapo_ops.launch.resume import Resume, moved_ranks, resumable
from dapo_ops.launch.saved_steps import describe, holders_text, last_complete, listing_command, parse_listing, \
    prune_command, prune_plan, \
    saved_steps
from dapo_ops.paths import PROJECT_ROOT

LISTINGS = PROJECT_ROOT / "tests" / "data" / "checkpoints"


def node_local():
    return {node: parse_listing((LISTINGS / f"node-local-{node}.txt").read_text()) for node in ("node1", "node2")}


def test_a_step_is_complete_with_every_rank_s_files_whole_on_some_node_and_the_tracker_past_it():
    steps = saved_steps(node_local(), 8)
    assert [(s.step, s.complete) for s in steps] == [(3, True), (4, True), (5, False)]
    last = last_complete(steps)
    assert last.step == 4 and last.holders == {"node1": [0, 1, 2, 3], "node2": [4, 5, 6, 7]}
    assert holders_text(last) == "ranks 0-3 on node1, ranks 4-7 on node2"
    # step 5: node2 was cut off while writing it, and rank 3's optimizer state on node1 ends short
    assert steps[-1].missing == ["model shard of rank(s) 6-7", "optim shard of rank(s) 3,6-7",
                                 "extra_state shard of rank(s) 6-7", "data.pt",
                                 "newer than latest_checkpointed_iteration.txt (4)"]
    assert describe(steps).startswith("last complete step 4 (ranks 0-3 on node1, ranks 4-7 on node2); step 5 "
                                      "incomplete: model shard of rank(s) 6-7")


def test_without_the_node_that_holds_some_ranks_no_step_is_complete():
    steps = saved_steps({"node1": node_local()["node1"]}, 8)
    assert last_complete(steps) is None and describe(steps).startswith("no complete step; ")
    # a world size other than the one saved (verl cannot reshard) finds no shard at all
    assert last_complete(saved_steps(node_local(), 16)) is None


def test_a_step_newer_than_every_tracker_is_not_complete_even_with_every_file():
    listings = node_local()
    listings["node1"] = parse_listing((LISTINGS / "node-local-node1.txt").read_text().replace("tracker 4", "tracker 3"))
    assert last_complete(saved_steps(listings, 8)).step == 3
    listings["node1"] = parse_listing((LISTINGS / "node-local-node1.txt").read_text().replace("tracker 4", "tracker"))
    assert last_complete(saved_steps(listings, 8)) is None


def test_the_listing_command_reads_verl_s_names_only_and_tells_a_cut_file_from_a_whole_one(tmp_path):
    import zipfile

    actor = tmp_path / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    for name in ("model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt"):
        with zipfile.ZipFile(actor / name, "w") as archive:
            archive.writestr("archive/data.pkl", b"x" * 100)
    (actor / "extra_state_world_size_1_rank_0.pt").write_bytes(b"PK\x03\x04 cut short")
    (actor / "model_world_size_1_rank_0.pt.tmp").write_text("not verl's")
    (actor / "x\nfile global_step_9").mkdir()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("2")
    out = subprocess.run(["bash", "-c", listing_command(str(tmp_path))], capture_output=True, text=True, check=True)
    listing = parse_listing(out.stdout)
    assert listing.tracker == 2 and listing.whole == {"global_step_2/actor/model_world_size_1_rank_0.pt",
                                                      "global_step_2/actor/optim_world_size_1_rank_0.pt"}
    assert listing.cut == {"global_step_2/actor/extra_state_world_size_1_rank_0.pt"}
    absent = subprocess.run(["bash", "-c", listing_command(str(tmp_path / "none"))], capture_output=True, text=True)
    assert not parse_listing(absent.stdout).present


@pytest.mark.parametrize("output", ["", "tracker 1\nfile ../../etc/passwd 10 504b0506\n", "hello\n",
                                    "tracker 1\nfile global_step_1/data.pt ten 504b0506\n"])
def test_a_listing_that_is_not_the_command_s_is_a_parse_error(output):
    with pytest.raises(ParseError):
        parse_listing(output)


def test_free_space_is_read_from_df_of_the_nearest_existing_directory(tmp_path):
    out = subprocess.run(["bash", "-c", space_command(str(tmp_path / "a" / "b"))], capture_output=True, text=True,
                         check=True)
    where, gib = parse_space(out.stdout)
    assert where == str(tmp_path) and gib > 0
    assert parse_space("dir /data\n/dev/nvme0n1p1 3750000000 1000 3748000000 1% /data\n") == \
        ("/data", pytest.approx(3748000000 / 2**20))
    with pytest.raises(ParseError):
        parse_space("dir /data\ndf: /data: Permission denied\n")


def record(**changes):
    values = dict(run_id="r1", job="j", nodes=["node1", "node2"], head="node1", head_address="10.0.0.1",
                  dashboard="http://10.0.0.1:8265", node_dir="/var/lib/dapo-ops/runs/r1", state="failed",
                  submission_id="dapo-r1", checkpoint_root="/ckpt/j/r1", world_size=16)
    return RunRecord(**{**values, **changes})


@pytest.mark.parametrize("changes, message", [
    ({"state": "running"}, "is running: stop it first"),
    ({"state": "succeeded"}, "succeeded: there is nothing left to resume"),
    ({"state": "rehearsed", "submission_id": None}, "never submitted its job"),
    ({"checkpoint_root": None}, "records no checkpoint directory"),
])
def test_only_an_attempt_that_ended_unfinished_with_checkpoints_is_resumed(changes, message):
    with pytest.raises(UsageError, match=message):
        resumable(record(**changes))
    resumable(record(state="stopped"))


def test_node_local_checkpoints_need_the_nodes_at_the_addresses_their_ranks_were_given_by():
    resume = Resume("r1", "r1", 4, ("node1", "node2"), {"node1": "10.0.0.1", "node2": "10.0.0.2"})
    assert moved_ranks(resume, {"node1": "10.0.0.1", "node2": "10.0.0.2"}) is None
    moved = moved_ranks(resume, {"node1": "10.0.0.1", "node2": "10.0.0.12"})
    assert "node2 10.0.0.2 -> 10.0.0.12" in moved and "order of their addresses" in moved
    shared = Resume("r1", "r1", 4, ("node1", "node2"), resume.addresses, shared=True)
    assert moved_ranks(shared, {"node1": "10.0.0.7", "node2": "10.0.0.8"}) is None


def test_a_directory_is_shared_when_a_marker_written_on_one_node_is_seen_on_every_other(monkeypatch):
    import shlex

    from dapo_ops.fleet import shared_dir
    from dapo_ops.fleet.ssh import CommandResult, HostSpec

    disks = {"node1": set(), "node2": set(), "node3": set()}

    def fake_run(host, command, timeout=0):
        disk = disks[host.name]
        words = shlex.split(command.replace("&&", " && "))
        path = words[-1] if not command.startswith("test -e") else words[2]
        if command.startswith("umask"):
            disk.add(path)
        elif command.startswith("rm -f"):
            disk.discard(path)
        elif command.startswith("test -e") and path in disk:
            return CommandResult(host.name, command, 0, shared_dir.SEEN + "\n", "", 0.0)
        return CommandResult(host.name, command, 0 if not command.startswith("test") else 1, "", "", 0.0)

    monkeypatch.setattr(shared_dir, "run_on", fake_run)
    hosts = [HostSpec(name=n, address=n, known_hosts=Path("/dev/null")) for n in disks]
    assert not shared_dir.is_shared(hosts, "/ckpt")                  # three node-local disks
    disks["node2"] = disks["node3"] = disks["node1"]                  # one filesystem
    assert shared_dir.is_shared(hosts, "/ckpt") and disks["node1"] == set()   # the marker is removed
    assert not shared_dir.is_shared(hosts[:1], "/ckpt")               # nothing to share with


class Node:
    def __init__(self, name, npus=16):
        self.name, self.npus = name, npus


def planned(monkeypatch, unread=(), answering=("node3",), shared=None, complete=True):
    from dapo_ops.launch import resume
    from dapo_ops.launch.saved_steps import SavedStep

    step = SavedStep(6, [] if complete else ["data.pt"], {"node1": list(range(16))})
    monkeypatch.setattr(resume, "read_saved_steps", lambda hosts, root, world: (
        [step], {name: "connection timed out" for name in unread}))
    monkeypatch.setattr(resume, "answering", lambda hosts: [h for h in hosts if h.name in answering])
    monkeypatch.setattr(resume, "is_shared", lambda hosts, directory: False)
    nodes = {n: Node(n) for n in ("node1", "node2", "node3")} | {"small": Node("small", 8)}
    said = []
    plan = resume.plan_resume(record(world_size=32, checkpoint_shared=shared), nodes, said.append)
    return plan, said


def test_a_resume_keeps_the_nodes_and_refuses_node_local_checkpoints_without_one_of_them(monkeypatch):
    plan, said = planned(monkeypatch)
    assert (plan.step, plan.nodes, plan.shared) == (6, ("node1", "node2"), False)
    assert said == ["r1: last complete step 6 (ranks 0-15 on node1)"]
    with pytest.raises(UsageError, match="from node-local checkpoints while a node of it is gone \\(node2: "
                                         "connection timed out\\): its ranks' shards are only there"):
        planned(monkeypatch, unread=("node2",), shared=False)
    with pytest.raises(UsageError, match="has no complete checkpoint to resume from"):
        planned(monkeypatch, complete=False)


def test_on_shared_storage_a_spare_node_of_the_same_shape_takes_a_lost_one_s_place(monkeypatch):
    plan, said = planned(monkeypatch, unread=("node2",), shared=True, answering=("small", "node3"))   # small: 8 NPUs
    assert (plan.nodes, plan.shared) == (("node1", "node3"), True)
    assert "node2 gone: the checkpoints are on shared storage, so node3 take(s) their place" in said
    with pytest.raises(UsageError, match="node2 gone and 0 spare node\\(s\\) with 16 NPUs answering"):
        planned(monkeypatch, unread=("node2",), shared=True, answering=())


def test_what_verl_leaves_on_the_other_nodes_is_pruned_down_to_the_steps_kept():
    listings = node_local()                       # complete: 3, 4; step 5 half-written
    assert prune_plan(listings, 8, 1) == {"node1": [3], "node2": [3]}
    assert prune_plan(listings, 8, 2) == {}       # both complete steps kept; the one being written never touched
    assert prune_plan(listings, 8, 3) == {}       # fewer complete than kept: nothing
    assert prune_command("/ckpt/r 1", [3, 4]) == ("rm -rf -- '/ckpt/r 1/global_step_3/actor'; "
                                                  "rm -rf -- '/ckpt/r 1/global_step_4/actor'")


def test_an_attempt_resumed_by_watch_records_the_doctor_s_root_cause_of_the_failure(tmp_path, monkeypatch):
    import shutil

    from dapo_ops.cli.runs import doctor_cause
    from dapo_ops.launch import records

    monkeypatch.setattr(records, "RUNS_DIR", tmp_path)
    failed = record()
    assert doctor_cause(failed) is None                          # no console kept: no cause
    failed.directory.mkdir()
    shutil.copyfile(PROJECT_ROOT / "tests/data/doctor/single/dapo-max-gen-batches/job-driver-raysubmit_Ab12.log",
                    failed.directory / "console.log")
    assert doctor_cause(failed).startswith("dapo-max-gen-batches: ")
