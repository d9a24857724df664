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
