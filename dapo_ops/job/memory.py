"""The memory a DAPO job needs, estimated before any NPU is allocated (pure): HBM per NPU for each phase, and host
memory per node. What verl and vllm-ascend at the pinned tags really hold, read in their source:

- The FSDP actor is built in fp32 (verl/workers/fsdp_workers.py:324-326, `torch.float32 if self._is_actor`), the
  reference in bf16; FSDP gathers one unit at a time in bf16 (mixed precision `param_dtype`), and the one after it
  is prefetched.
- `update_actor` loads the whole local parameter shard and every Adam state back onto the NPU before it trains
  (fsdp_workers.py:909-912, `load_fsdp_model_to_gpu`, `load_fsdp_optimizer` in verl/utils/fsdp_utils.py), and the
  gradients are fp32 like the parameters: offload frees HBM for the rollout, not for the update. The update phase
  therefore holds 4P/W of parameters, 4P/W of gradients and 8P/W of Adam m and v per NPU (P parameters, W ranks).
- `compute_log_prob` (the old log-probs) loads the parameter shard too, without gradients or optimizer.
- On NPU verl puts vLLM to sleep at level 1 (verl/third_party/vllm/__init__.py: "sleep_mode=2 is not supported on
  vllm-ascend"), and level 1 copies each rank's weights into pinned host memory (vllm-ascend
  vllm_ascend/device_allocator/camem.py, `sleep(offload_tags=("weights",))`): 2P/TP bytes per rollout rank.
- Offloaded FSDP shards and Adam states live in host memory (fsdp_utils.py `offload_fsdp_model_to_cpu`,
  `offload_fsdp_optimizer`), and the reference's shard with `ref_param_offload` (FSDP CPUOffload).
- At start-up the rank whose mesh coordinate is 0 loads the whole model in fp32 on the CPU before FSDP shards it
  (fsdp_utils.py `get_init_weight_context_manager`): 4P bytes on that one node, before any offloaded state exists.

It is an estimate for catching an impossible configuration before a 32-NPU allocation is spent, not a profile.
"""

from __future__ import annotations

import math

from dapo_ops.job.placement import world_size
from dapo_ops.job.spec import JobSpec

GIB = 2**30
NEAR = 0.9                   # a need above this share of what there is is warned about: the estimate is no profile
NPU_RUNTIME = 2.0 * GIB      # per NPU: HCCL buffers, workspace, fragmentation
HOST_RUNTIME = 4.0 * GIB     # per rank on the host: one Ray worker process with torch_npu, CANN and vLLM loaded
HBM_KEYS = ("hbm_gib", "actor_update_gib", "actor_log_prob_gib", "reference_log_prob_gib", "rollout_budget_gib",
            "rollout_weights_gib", "rollout_kv_capacity_tokens", "rollout_full_sequences")
HBM_PHASES = {"actor_update_gib": "actor update", "actor_log_prob_gib": "actor log-prob",
              "reference_log_prob_gib": "reference log-prob"}
HOST_KEYS = ("host_mem_gib", "host_actor_params_gib", "host_actor_optimizer_gib", "host_reference_params_gib",
             "host_rollout_weights_gib", "host_runtime_gib", "host_model_load_gib")


def hbm_estimate(spec: JobSpec, hbm_mb: int) -> dict[str, float]:
    """Peak HBM per NPU in GiB for each phase (docs/jobs.md, the memory estimate), and vLLM's KV cache."""
    m, act, r, d = spec.model.architecture, spec.actor, spec.rollout, spec.data
    world = world_size(spec)
    params = m.parameters_b * 1e9
    tokens = act.max_token_len_per_npu
    ffn = m.experts_per_token * m.moe_intermediate_size if m.experts else m.intermediate_size
    gathered = 2 * 2 * params / m.layers                          # bf16 unit in use + the one prefetched
    shard_fp32 = 4 * params / world                               # the actor's local shard, loaded for each phase
    grads = 4 * params / world                                    # fp32, as the parameters
    adam = 8 * params / world                                     # m and v in fp32 (the fp32 params are the master)
    layer_peak = tokens * (m.hidden_size * 34 + ffn * 6)          # one layer recomputed: attention + MLP/experts
    checkpoints = m.layers * tokens * m.hidden_size * 2 if spec.model.gradient_checkpointing else \
        m.layers * layer_peak
    logits = tokens * m.vocab_size * 4 * 2                        # fp32 logits and their gradient
    update = shard_fp32 + gathered + grads + adam + checkpoints + layer_peak + logits + NPU_RUNTIME
    forward_only = tokens * m.hidden_size * 2 * 4 + tokens * m.vocab_size * 4 + NPU_RUNTIME
    log_prob = shard_fp32 + gathered + forward_only
    reference = (gathered if act.ref_param_offload else 2 * params / world + gathered) + forward_only
    rollout_budget = r.gpu_memory_utilization * hbm_mb * 2**20
    rollout_weights = 2 * params / r.tensor_parallel_size
    kv_heads_per_npu = max(1, m.kv_heads // r.tensor_parallel_size)
    kv_per_token = 2 * m.layers * kv_heads_per_npu * m.head_dim * 2
    kv_capacity_tokens = max(0.0, rollout_budget - rollout_weights - NPU_RUNTIME) / kv_per_token
    return {
        "hbm_gib": hbm_mb / 1024,
        "actor_update_gib": update / GIB,
        "actor_log_prob_gib": log_prob / GIB,
        "reference_log_prob_gib": reference / GIB,
        "rollout_budget_gib": rollout_budget / GIB,
        "rollout_weights_gib": rollout_weights / GIB,
        "rollout_kv_capacity_tokens": kv_capacity_tokens,
        "rollout_full_sequences": kv_capacity_tokens / (d.max_prompt_length + d.max_response_length),
    }


def host_memory_estimate(spec: JobSpec, rollout_sleeps: bool = True) -> dict[str, float]:
    """Host memory per node in GiB: what the node's ranks keep there in training (offloaded shards and Adam states,
    the sleeping vLLM's weights, each rank's process), or the start-up model load if that is larger."""
    m, act, r = spec.model.architecture, spec.actor, spec.rollout
    world, ranks = world_size(spec), spec.cluster.npus_per_node or 0
    params = m.parameters_b * 1e9
    parts = {
        "host_actor_params_gib": ranks * 4 * params / world if act.param_offload else 0.0,
        "host_actor_optimizer_gib": ranks * 8 * params / world if act.optimizer_offload else 0.0,
        "host_reference_params_gib": ranks * 2 * params / world if act.ref_param_offload else 0.0,
        "host_rollout_weights_gib": ranks * 2 * params / r.tensor_parallel_size
        if r.name == "vllm" and rollout_sleeps else 0.0,
        "host_runtime_gib": ranks * HOST_RUNTIME,
    }
    parts = {key: value / GIB for key, value in parts.items()}
    parts["host_model_load_gib"] = (4 * params + ranks * HOST_RUNTIME) / GIB
    steady = sum(value for key, value in parts.items() if key != "host_model_load_gib")
    return {"host_mem_gib": max(steady, parts["host_model_load_gib"]), **parts}


CHECKPOINT_KEYS = ("checkpoint_node_gib", "checkpoint_rank_gib")


def checkpoint_estimate(spec: JobSpec) -> dict[str, float]:
    """The disk one saved step takes, in GiB, per rank and on each node. verl's FSDP checkpoint manager
    (verl/utils/checkpoint/fsdp_checkpoint_manager.py, save_checkpoint) has every rank write, under
    global_step_N/actor/ on its own node, its shard of the fp32 actor (model_world_size_W_rank_R.pt: 4P/W bytes) and
    its AdamW state (optim_world_size_W_rank_R.pt: exp_avg and exp_avg_sq in fp32, 8P/W), `save_contents` being
    [model, optimizer, extra] by default (verl/trainer/config/actor/actor.yaml). The extra state (learning-rate
    scheduler, RNG), rank 0's huggingface/ config and the driver's data.pt are far smaller and left out."""
    world, ranks = world_size(spec), spec.cluster.npus_per_node or 0
    rank = 12 * spec.model.architecture.parameters_b * 1e9 / world
    return {"checkpoint_node_gib": ranks * rank / GIB, "checkpoint_rank_gib": rank / GIB}


def host_need_gib(spec: JobSpec, npus_per_node: int) -> float:
    """The host memory per node of a spec not yet placed (preflight: the spec's node count, the inventory's NPUs
    per node), with verl's sleep mode unless an extra override turns it off (validate composes the real value)."""
    import dataclasses

    cluster = dataclasses.replace(spec.cluster, npus_per_node=spec.cluster.npus_per_node or npus_per_node)
    sleeps = not any(o.replace(" ", "").lower() == "actor_rollout_ref.rollout.enable_sleep_mode=false"
                     for o in spec.extra_overrides)
    return host_memory_estimate(dataclasses.replace(spec, cluster=cluster), sleeps)["host_mem_gib"]


def safe(estimate, keys, *args) -> dict[str, float]:
    """The estimate, or NaNs where a size the arithmetic refuses (a TP size of 0...) leaves nothing to divide by."""
    try:
        return estimate(*args)
    except ZeroDivisionError:
        return dict.fromkeys(keys, math.nan)


def hbm_problems(est: dict[str, float], spec: JobSpec) -> tuple[list[str], list[str]]:
    """(errors, warnings): a phase that cannot fit in the card's HBM is refused, one near the limit warned about."""
    errors, warnings = [], []
    hbm = est["hbm_gib"]
    for key, phase in HBM_PHASES.items():
        need = est[key]
        if need > hbm:
            errors.append(f"the {phase} phase needs about {need:.1f} GiB per NPU, more than the {hbm:.0f} GiB of "
                          "HBM: lower actor.max_token_len_per_npu, raise the SP size or use more NPUs")
        elif need > NEAR * hbm:
            warnings.append(f"the {phase} phase needs about {need:.1f} GiB per NPU, within 10% of the {hbm:.0f} "
                            "GiB of HBM")
    if est["rollout_weights_gib"] + NPU_RUNTIME / GIB > est["rollout_budget_gib"]:
        errors.append(f"vLLM's weights need {est['rollout_weights_gib']:.1f} GiB per NPU but "
                      f"gpu_memory_utilization {spec.rollout.gpu_memory_utilization} gives it "
                      f"{est['rollout_budget_gib']:.1f} GiB: raise the rollout TP size or the utilization")
    elif est["rollout_full_sequences"] < 1:
        errors.append(f"vLLM's KV cache holds {est['rollout_kv_capacity_tokens']:.0f} tokens per NPU, less than one "
                      f"{spec.data.max_prompt_length + spec.data.max_response_length}-token sequence: raise the "
                      "rollout TP size or gpu_memory_utilization")
    return errors, warnings


def host_memory_problems(need_gib: float, node_gib: dict[str, float]) -> tuple[list[str], list[str]]:
    """(errors, warnings) for each node's memory (GiB, as the node reports it) against the job's need per node."""
    errors, warnings = [], []
    for name, has in node_gib.items():
        if need_gib > has:
            errors.append(f"{name}: the job needs about {need_gib:.0f} GiB of host memory per node (offloaded FSDP "
                          f"shards and Adam states, vLLM's sleeping weights), but {name} has {has:.0f} GiB: use "
                          "nodes with more memory or more of them, or turn an offload off")
        elif need_gib > NEAR * has:
            warnings.append(f"{name}: the job needs about {need_gib:.0f} GiB of host memory per node, within 10% of "
                            f"the {has:.0f} GiB {name} has")
    return errors, warnings
