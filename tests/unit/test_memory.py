"""The memory estimate (dapo_ops/job/memory.py) on the shipped job, with the numbers worked by hand: Qwen3-30B-A3B,
P = 30.5e9, 48 layers, hidden 2048, vocabulary 151936, 8 of 128 experts of width 768, T = 11264 tokens per NPU,
rollout TP 2, gpu_memory_utilization 0.8 of 64 GiB."""

import dataclasses

import pytest
import yaml

from dapo_ops.job.memory import (GIB, checkpoint_estimate, hbm_estimate, hbm_problems, host_memory_estimate,
                                 host_memory_problems)
from dapo_ops.job.model_facts import model_facts, with_facts
from dapo_ops.job.spec import parse_spec
from dapo_ops.paths import PROJECT_ROOT

SEED = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"
P, W16, W32 = 30.5e9, 16, 32
HBM_MB = 65536


def placed(npus_per_node: int, **changes):
    spec = parse_spec(yaml.safe_load(SEED.read_text()))
    spec = with_facts(spec, model_facts(spec, None))             # the architecture as validate resolves it
    spec = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, nodes=2, npus_per_node=npus_per_node))
    for section, values in changes.items():
        spec = dataclasses.replace(spec, **{section: dataclasses.replace(getattr(spec, section), **values)})
    return spec


def by_hand_update(world: int) -> float:
    """fp32 shard + fp32 grads + Adam m, v (16 P/W), two bf16 layers gathered, checkpoints, one layer, logits, 2 GiB."""
    tokens, hidden, layers, vocab, ffn = 11264, 2048, 48, 151936, 8 * 768
    states = 16 * P / world
    gathered = 2 * 2 * P / layers
    checkpoints = layers * tokens * hidden * 2
    layer = tokens * (34 * hidden + 6 * ffn)
    logits = tokens * vocab * 8
    return (states + gathered + checkpoints + layer + logits) / GIB + 2


@pytest.mark.parametrize("npus, world, expected", [(16, W32, 34.5), (8, W16, 48.7)])
def test_the_actor_update_holds_the_fp32_shard_grads_and_adam_states_offload_or_not(npus, world, expected):
    est = hbm_estimate(placed(npus), HBM_MB)
    assert est["actor_update_gib"] == pytest.approx(by_hand_update(world), rel=1e-9)
    assert round(est["actor_update_gib"], 1) == expected       # the order the review worked out (35, 49)
    resident = hbm_estimate(placed(npus, actor={"param_offload": False, "optimizer_offload": False}), HBM_MB)
    assert resident["actor_update_gib"] == pytest.approx(est["actor_update_gib"])   # update_actor loads them all back
    assert est["actor_log_prob_gib"] < est["actor_update_gib"]
    assert est["rollout_weights_gib"] == pytest.approx(2 * P / 2 / GIB)


def test_a_phase_over_the_hbm_is_refused_and_one_near_it_warned_about():
    near = hbm_estimate(placed(8), HBM_MB)                        # 48.7 GiB of 64
    errors, warnings = hbm_problems(near, placed(8))
    assert errors == [] and warnings == []
    errors, warnings = hbm_problems(hbm_estimate(placed(8), 53 * 1024), placed(8))   # 48.7 > 0.9 x 53
    assert errors == [] and warnings == ["the actor update phase needs about 48.7 GiB per NPU, within 10% of the 53 "
                                         "GiB of HBM"]
    errors, _ = hbm_problems(hbm_estimate(placed(8), 48 * 1024), placed(8))
    assert errors[0].startswith("the actor update phase needs about 48.7 GiB per NPU, more than the 48 GiB of HBM")


def test_host_memory_per_node_counts_offloaded_states_and_vllms_sleeping_weights():
    host = host_memory_estimate(placed(8))
    eight_ranks = {"host_actor_params_gib": 8 * 4 * P / W16, "host_actor_optimizer_gib": 8 * 8 * P / W16,
                   "host_reference_params_gib": 8 * 2 * P / W16, "host_rollout_weights_gib": 8 * 2 * P / 2,
                   "host_runtime_gib": 8 * 4 * GIB}
    for key, value in eight_ranks.items():
        assert host[key] == pytest.approx(value / GIB), key
    assert host["host_mem_gib"] == pytest.approx(sum(eight_ranks.values()) / GIB)
    assert round(host["host_mem_gib"]) == 458
    assert host["host_model_load_gib"] == pytest.approx((4 * P + 8 * 4 * GIB) / GIB)
    awake = host_memory_estimate(placed(8), rollout_sleeps=False)
    assert awake["host_rollout_weights_gib"] == 0
    kept = host_memory_estimate(placed(8, actor={"param_offload": False, "optimizer_offload": False,
                                                  "ref_param_offload": False}), rollout_sleeps=False)
    assert kept["host_mem_gib"] == kept["host_model_load_gib"]     # nothing offloaded: the start-up load is the peak


@pytest.mark.parametrize("npus, world, node_gib", [(8, W16, 170), (16, W32, 170)])
def test_a_saved_step_holds_each_rank_s_fp32_shard_and_adamw_state_on_its_node(npus, world, node_gib):
    """12 P/W bytes a rank (4 for the fp32 parameters, 8 for AdamW's m and v): the same 170 GiB a node whatever the
    node size, since the node holds 1/nodes of the model."""
    est = checkpoint_estimate(placed(npus))
    assert est["checkpoint_rank_gib"] == pytest.approx(12 * P / world / GIB)
    assert est["checkpoint_node_gib"] == pytest.approx(npus * 12 * P / world / GIB)
    assert round(est["checkpoint_node_gib"]) == node_gib
    assert est["checkpoint_node_gib"] == pytest.approx(host_memory_estimate(placed(npus))["host_actor_params_gib"]
                                                       + host_memory_estimate(placed(npus))["host_actor_optimizer_gib"])


def test_a_node_short_of_host_memory_is_refused_by_name_and_one_near_it_warned_about():
    errors, warnings = host_memory_problems(458.0, {"node1": 1024.0, "node2": 480.0, "node3": 256.0})
    assert warnings == ["node2: the job needs about 458 GiB of host memory per node, within 10% of the 480 GiB "
                        "node2 has"]
    assert len(errors) == 1 and errors[0].startswith("node3: the job needs about 458 GiB of host memory per node")
    assert "but node3 has 256 GiB" in errors[0]
