"""What makes a node of a running run lost, from its `npu-smi info` (launch/watch.py node_problem)."""

from pathlib import Path

import yaml

from dapo_ops.launch.watch import loss_reason, node_problem

RECORDED = yaml.safe_load((Path(__file__).parents[1] / "data" / "facts" / "npu_smi_info" / "two-npus.yml").read_text())
TWO_NPUS = {"output": RECORDED["output"].replace("| Alarm ", "| OK    ")}  # the recording's NPU 1 is in Alarm


def test_a_healthy_node_with_all_its_npus_is_not_lost():
    assert node_problem((0, TWO_NPUS["output"]), 2) is None
    assert node_problem((0, TWO_NPUS["output"]), None) is None


def test_an_unhealthy_or_missing_npu_names_the_npu():
    sick = TWO_NPUS["output"].replace("| OK ", "| Critical ", 1)
    assert sick != TWO_NPUS["output"]
    assert node_problem((0, sick), 2) == "NPU 0 health is Critical"
    assert node_problem((0, TWO_NPUS["output"]), 16) == "2 of its 16 NPUs are visible"


def test_a_failing_or_garbled_npu_smi_is_a_loss_with_its_last_line():
    assert node_problem((127, "bash: npu-smi: command not found\n"), 2) == \
        "npu-smi info failed (exit 127): bash: npu-smi: command not found"
    assert node_problem((0, "garbage\n"), 2).startswith("npu-smi info unreadable")
    assert loss_reason({"node2": "unreachable", "node1": "x"}) == \
        "node1 lost during training: x; node2 lost during training: unreachable"


def test_the_fence_line_is_split_from_npu_smi_s_output():
    from dapo_ops.launch.watch import split_fence

    output = TWO_NPUS["output"].rstrip("\n") + "\n"
    assert split_fence("DAPO-FENCE restored\n" + output) == (output, "restored")
    assert split_fence(output) == (output, None)                      # the run has no table (dapo_ray_firewall off)
    assert split_fence("DAPO-FENCE ok\n") == ("", "ok")
    assert split_fence("DAPO-FENCE ok\ndcmi error, no newline") == ("dcmi error, no newline", "ok")
    assert node_problem((0, split_fence("DAPO-FENCE ok\n" + output)[0]), 2) is None


def test_a_table_that_was_gone_is_reported_restored_or_not():
    from dapo_ops.launch.watch import fence_note

    assert fence_note("node2", "ok") is None
    assert fence_note("node2", "restored") == ("node2: the run's firewall table was gone (a reload of the site's "
                                               "firewall flushes it) and is loaded again")
    assert fence_note("node2", "failed Error: Could not process rule") == (
        "node2: the run's firewall table is gone and could not be loaded again (Error: Could not process rule): "
        "Ray's ports answer the network, token-checked only")


def test_the_look_restores_the_table_only_from_the_run_s_file_while_the_lock_is_the_run_s():
    from dapo_ops.launch.records import RunRecord
    from dapo_ops.launch.watch import look_command

    record = RunRecord(run_id="r-1", job="j", nodes=["a"], head="a", head_address="10.0.0.1",
                       dashboard="http://127.0.0.1:8265", node_dir="/var/lib/dapo-ops/runs/r-1")
    command = look_command(record)
    assert command.endswith("; npu-smi info")   # the table first: a hung npu-smi cannot keep it unrestored
    assert "nft list table inet dapo_ops_r_1" in command and "nft -f /var/lib/dapo-ops/runs/r-1/ray-firewall.nft" in command
    assert "grep -qF '\"run_id\": \"r-1\"' /var/lib/dapo-ops/cluster.lock" in command


FAKE_NFT = """#!/bin/bash
echo "nft $*" >> "$FAKE_LOG"
case "$1" in
  list) exit "${NFT_LIST_RC:-0}" ;;
  -f) [ -z "$NFT_LOAD_RELEASES_LOCK" ] || rm -f "$FAKE_LOCK"; [ "${NFT_LOAD_RC:-0}" = 0 ] || echo "Error: bad rule" >&2
      exit "${NFT_LOAD_RC:-0}" ;;
  delete) exit 0 ;;
esac
"""


def test_the_look_run_by_bash_restores_reports_and_gives_npu_smi_s_exit_code(tmp_path, monkeypatch):
    import subprocess

    from dapo_ops.launch import locks
    from dapo_ops.launch.records import RunRecord
    from dapo_ops.launch.watch import look_command, split_fence

    bin_dir, lock, node_dir = tmp_path / "bin", tmp_path / "cluster.lock", tmp_path / "runs" / "r-1"
    bin_dir.mkdir()
    node_dir.mkdir(parents=True)
    (node_dir / "ray-firewall.nft").write_text("table inet dapo_ops_r_1\n")
    (bin_dir / "nft").write_text(FAKE_NFT)
    (bin_dir / "npu-smi").write_text("#!/bin/bash\necho npu table\nexit ${NPU_SMI_RC:-0}\n")
    for tool in ("nft", "npu-smi"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setattr(locks, "LOCK_FILE", str(lock))
    record = RunRecord(run_id="r-1", job="j", nodes=["a"], head="a", head_address="10.0.0.1",
                       dashboard="http://127.0.0.1:8265", node_dir=str(node_dir))
    command = look_command(record)

    def look(**env):
        lock.write_text('{"run_id": "r-1", "nodes": ["a"]}\n')
        log = tmp_path / "nft.log"
        log.write_text("")
        run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30,
                             env={"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(log), "FAKE_LOCK": str(lock),
                                  **env})
        return run.returncode, split_fence(run.stdout), log.read_text().splitlines()

    assert look() == (0, ("npu table\n", "ok"), ["nft list table inet dapo_ops_r_1"])
    rc, fence, calls = look(NFT_LIST_RC="1")
    assert (rc, fence[1], calls[-1]) == (0, "restored", f"nft -f {node_dir}/ray-firewall.nft")
    assert look(NFT_LIST_RC="1", NFT_LOAD_RC="1")[1][1] == "failed Error: bad rule"
    rc, fence, calls = look(NFT_LIST_RC="1", NFT_LOAD_RELEASES_LOCK="1")   # a `stop` between the two
    assert fence == ("npu table\n", None) and calls[-1] == "nft delete table inet dapo_ops_r_1"
    assert look(NPU_SMI_RC="3")[0] == 3                                   # npu-smi's exit code is the look's


def test_nodes_going_away_while_dapo_ops_stop_stops_the_run_are_not_a_loss(tmp_path, monkeypatch):
    """`dapo-ops stop` records that it is stopping the run before it stops the job; a `watch` of the same run then
    takes Ray going away for the stop, and ends with the run stopped, not failed."""
    from dapo_ops.launch import records, watch
    from dapo_ops.launch.records import STOP_REQUESTED, RunRecord

    monkeypatch.setattr(records, "RUNS_DIR", tmp_path)
    record = RunRecord(run_id="r-1", job="j", nodes=["a"], head="a", head_address="10.0.0.1",
                       dashboard="http://127.0.0.1:8265", node_dir="/var/lib/dapo-ops/runs/r-1", state="running")
    record.directory.mkdir()
    record.save()
    lost = watch.Health(lost={"a": "Ray on the head does not answer"})
    monkeypatch.setattr(watch, "check", lambda record, by_name: lost)
    handled, said = [], []
    monkeypatch.setattr(watch, "handle_loss", lambda *args: handled.append(args))
    stopping = records.load_run("r-1")            # another process: `dapo-ops stop r-1`
    stopping.timestamps[STOP_REQUESTED] = "2026-12-06T16:00:00Z"
    stopping.save()
    watch.watch_once(record, {}, "stop", said.append)
    assert not handled and record.state == "running" and "is being stopped (dapo-ops stop)" in said[0]
    stopping.mark("stopped")
    watch.watch_once(record, {}, "stop", said.append)
    assert not handled and record.state == "stopped"
    del stopping.timestamps[STOP_REQUESTED]       # without a stop, the same look is a loss
    record.state = "running"
    stopping.state = "running"
    stopping.save()
    watch.watch_once(record, {}, "stop", said.append)
    assert len(handled) == 1
