"""Which node Ray counts a wrong number of NPU on (launch/cluster.py npu_mismatch)."""

from dapo_ops.launch.cluster import npu_mismatch

ADDRESSES = {"node1": "10.0.0.1", "node2": "10.0.0.2"}


def test_the_node_with_another_npu_count_is_named_with_its_address():
    seen = {"alive": 2, "npu": 24.0, "npu_by_host": {"10.0.0.1": 16.0, "10.0.0.2": 8.0}}
    assert npu_mismatch(seen, ADDRESSES, 16) == ["node2 (10.0.0.2): 8"]


def test_all_right_or_not_yet_known_is_no_mismatch():
    assert npu_mismatch({"npu_by_host": {"10.0.0.1": 16.0, "10.0.0.2": 16.0}}, ADDRESSES, 16) == []
    assert npu_mismatch({"error": "no answer"}, ADDRESSES, 16) == []
    assert npu_mismatch({"npu_by_host": {"10.0.0.1": 16.0}}, ADDRESSES, 16) == []  # node2 not in yet
