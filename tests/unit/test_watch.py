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
    assert split_fence(output + "DAPO-FENCE restored\n") == (output, "restored")
    assert split_fence(output) == (output, None)                      # the run has no table (dapo_ray_firewall off)
    assert split_fence("DAPO-FENCE ok\n") == ("\n", "ok")
    assert node_problem((0, split_fence(output + "DAPO-FENCE ok\n")[0]), 2) is None


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
    assert command.startswith("npu-smi info; rc=$?;") and command.endswith("exit $rc")
    assert "nft list table inet dapo_ops_r_1" in command and "nft -f /var/lib/dapo-ops/runs/r-1/ray-firewall.nft" in command
    assert "grep -qF '\"run_id\": \"r-1\"' /var/lib/dapo-ops/cluster.lock" in command
