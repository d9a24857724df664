"""What stops verl, vLLM or the DAPO recipe after the NPUs are allocated, checked offline on the COMPOSED configuration
(verl's dapo_trainer with the job's overrides, `extra_overrides` included), at verl's own dotted keys. Each problem
is one line naming the key. Where a spec field wrote the key, "(from <field>)" follows it.

Run from verl's own code (the installed wheel, imported without torch: dapo_ops/job/verl_offline.py):
- verl/utils/config.py validate_config (verl's main_ppo start-up check; the DAPO recipe does not call it: verl
  v0.7.0 recipe/dapo/main_dapo.py): with dynamic batch size off, train_batch_size x rollout.n divisible by the NPUs
  and the ref's and rollout's log-prob micro-batch set once; rollout.temperature > 0 when val_kwargs.do_sample; the
  LoRA rank <= 512 for vLLM; the critic when verl would build one (verl/trainer/ppo/utils.py need_critic);
- verl/workers/config/actor.py ActorConfig/FSDPActorConfig __post_init__ and validate (through validate_config):
  loss_agg_mode one of verl's, a micro-batch size with dynamic batch size off (not both spellings), train batch >=
  mini-batch and micro-batch arithmetic with dynamic batch size off, use_remove_padding with Ulysses SP, the router
  replay mode; verl/workers/config/optimizer.py (lr_scheduler_type / warmup_style), verl/workers/config/engine.py
  (FSDP strategy), verl/utils/profiler/config.py;
- verl/workers/config/rollout.py RolloutConfig.__post_init__: the removed 'sync' mode, expert parallel size = TP x DP,
  no pipeline parallelism for vLLM, the trace config;
- the reference policy's FSDP config (verl/workers/config/engine.py) and the actor's profiler config
  (verl/utils/profiler/config.py), converted as verl/workers/fsdp_workers.py does;
- the logger names: verl/utils/tracking.py Tracking.supported_backend, read from verl (the loop is Tracking.__init__'s
  `assert backend in self.supported_backend, f"{backend} is not supported"`).

Reproduced here (they need torch, ray, vLLM or the model; the upstream file and function are named and the upstream
message quoted in each problem):
- heads vs Ulysses SP: verl/models/transformers/monkey_patch.py apply_monkey_patch (num_attention_heads and
  num_key_value_heads vs ulysses_sp_size; the model's facts: dapo_ops/job/model_facts.py);
- heads vs vLLM TP: vLLM vllm/config/model.py ModelConfig.verify_with_parallel_config ("Total number of attention
  heads (..) must be divisible by tensor parallel size (..)"), KV heads: the attention layers of vLLM's Qwen/Llama
  models (vllm/model_executor/models/qwen3_moe.py Qwen3MoeAttention: KV heads % TP == 0, or TP % KV heads == 0);
- vLLM's scheduler (vllm/config/scheduler.py SchedulerConfig): max_num_batched_tokens >= max_num_seqs; without
  chunked prefill it must hold a whole prompt. vLLM's own rule compares with max_model_len (verl sets it to the
  model's max_position_embeddings, verl/workers/rollout/vllm_rollout/vllm_async_server.py), but the pinned vLLM's V1
  engine turns chunked prefill on for generation models (vllm/engine/arg_utils.py EngineArgs._set_default_args: "V1
  always uses chunked prefills"; seen in vLLM v0.9.1's code and in a third party's reading of the pinned vLLM's, not
  in a checkout here), which is why verl's own Qwen3-8B/14B NPU scripts run with 22528 < 32768: dapo-ops asks for one
  whole sequence (data.max_prompt_length + max_response_length);
- verl/workers/fsdp_workers.py: the mini-batch normalised per data-parallel rank > 0 and divisible by the micro-batch
  (ActorRolloutRefWorker.__init__), an FSDP size that divides the world (create_device_mesh);
- verl/utils/seqlen_balancing.py rearrange_micro_batches: the ref's and rollout's log-prob token budgets x SP hold
  one sequence (the actor's is dapo-ops' own check in validate.py);
- recipe/dapo/main_dapo.py TaskRunner.run: an actor strategy it builds workers for, the critic's matching it;
- verl/workers/rollout/replica.py RolloutReplicaRegistry.get: a registered rollout engine (and vLLM: the only one
  the stack installs, stack/manifest.yml);
- verl/trainer/config/config.py RewardManagerConfig.__post_init__: a registered reward manager (the names read from
  the @register(...) decorators of verl/workers/reward_manager/*.py in the installed verl);
- verl/workers/reward_manager/dapo.py DAPORewardManager: data.max_response_length >= overlong_buffer.len;
- verl/trainer/ppo/core_algos.py compute_policy_loss_vanilla: clip_ratio_c > 1;
- recipe/dapo/dapo_ray_trainer.py fit: filter_groups.metric names a metric when filter_groups.enable.

dapo-ops' own ranges (verl takes these values as they are): optim.lr > 0, weight_decay >= 0, grad_clip > 0; vLLM's
(vllm/config/cache.py CacheConfig: 0 < gpu_memory_utilization <= 1; vllm/sampling_params.py SamplingParams
_verify_args: temperature >= 0, 0 < top_p <= 1, top_k >= -1) with the training temperature > 0 (verl/workers/actor/
dp_actor.py divides the logits by it); every port 1..65535 (the spec's Ray ports, any composed `port`/`*_port`);
the model, data and checkpoint paths absolute on the nodes (as dapo_ops/job/spec.py check_strings asks of the spec).
The arithmetic on the spec's own fields (world size, SP, TP, batches, lengths) stays in validate.py `arithmetic`, which
reads the folded spec (dapo_ops/job/composed.py): the same values at verl's keys.
"""

from __future__ import annotations

import ast
import math

from dapo_ops.job.composed import AR, FIELDS, Folded, read
from dapo_ops.job.model_facts import ModelFacts
from dapo_ops.job.verl_offline import run_verl_checks, verl_root

ACTOR, ROLLOUT, REF = f"{AR}.actor", f"{AR}.rollout", f"{AR}.ref"
SPEC_FIELD = {key: path for path, key in FIELDS.items()}


class Problems:
    """One line per problem; a later problem about a key already named is dropped (verl's own message wins)."""

    def __init__(self, folded: Folded, composed: dict, lines: list[str]):
        self.folded, self.composed, self.lines = folded, composed, list(lines)
        self.seen = folded.problems + self.lines   # the fold's type problems are reported by validate.py

    def label(self, key: str) -> str:
        path = SPEC_FIELD.get(key)
        return f"{key} (from {path})" if path and path not in self.folded.names else key

    def add(self, key: str, text: str) -> None:
        if not any(line.startswith((f"{key}:", f"{key} ")) for line in self.seen):
            self.lines.append(f"{self.label(key)} {text}")
            self.seen.append(self.lines[-1])

    def number(self, key: str):
        """The composed number at `key`, or None (with a problem) when it is something else."""
        value = read(self.composed, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if value is not None:
                self.add(key, f"is {value!r}: expected a number")
            return None
        return value


def _finite(p: Problems, key: str, ok, expected: str) -> None:
    value = p.number(key)
    if value is not None and not (math.isfinite(value) and ok(value)):
        p.add(key, f"{value} {expected}")


def ranges(p: Problems) -> None:
    _finite(p, f"{ACTOR}.optim.lr", lambda v: v > 0, "must be a positive number")
    _finite(p, f"{ACTOR}.optim.weight_decay", lambda v: v >= 0, "must be >= 0")
    _finite(p, f"{ACTOR}.grad_clip", lambda v: v > 0, "must be a positive number (the gradient norm clip)")
    _finite(p, f"{ROLLOUT}.gpu_memory_utilization", lambda v: 0 < v <= 1,
            "must be in (0, 1]: vLLM's CacheConfig (vllm/config/cache.py) takes a fraction of the NPU's memory")
    _finite(p, f"{ROLLOUT}.temperature", lambda v: v > 0,
            "must be > 0: verl's actor divides the logits by it (verl/workers/actor/dp_actor.py logits.div_)")
    _finite(p, f"{ROLLOUT}.val_kwargs.temperature", lambda v: v >= 0,
            "must be >= 0 (vLLM SamplingParams: 'temperature must be non-negative')")
    for key in (f"{ROLLOUT}.top_p", f"{ROLLOUT}.val_kwargs.top_p"):
        _finite(p, key, lambda v: 0 < v <= 1, "must be in (0, 1] (vLLM SamplingParams: 'top_p must be in (0, 1]')")
    for key in (f"{ROLLOUT}.top_k", f"{ROLLOUT}.val_kwargs.top_k"):
        _finite(p, key, lambda v: v >= -1 and v == int(v),
                "must be -1, 0 or a positive whole number (vLLM SamplingParams: 'top_k must be 0 (disable), or at "
                "least 1')")
    for key in (f"{ROLLOUT}.max_num_seqs", f"{ROLLOUT}.max_num_batched_tokens", f"{ROLLOUT}.val_kwargs.n"):
        _finite(p, key, lambda v: v >= 1, "must be at least 1")
    for key, value in _ports(p.composed):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            p.add(key, f"{value!r} is not a port (1..65535)")


def _ports(node, prefix: str = ""):
    for key, value in (node.items() if isinstance(node, dict) else ()):
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            yield from _ports(value, path)
        elif (key == "port" or str(key).endswith("_port")) and value is not None:
            yield path, value


def heads(p: Problems, facts: ModelFacts) -> None:
    sp, tp = p.number(f"{ACTOR}.ulysses_sequence_parallel_size"), p.number(f"{ROLLOUT}.tensor_model_parallel_size")
    h, kv, src = facts.attention_heads, facts.kv_heads, facts.source
    if h <= 0 or kv <= 0:
        p.add("model.architecture", f"has {h} attention heads and {kv} KV heads ({src}): both must be positive")
        return
    if isinstance(sp, int) and sp > 0:
        if h % sp:
            p.add(f"{ACTOR}.ulysses_sequence_parallel_size", f"{sp}: 'num_attention_heads {h} must be divisible by "
                  f"ulysses_sp_size {sp}' (verl/models/transformers/monkey_patch.py apply_monkey_patch; heads: {src})")
        elif kv % sp and sp % kv:
            p.add(f"{ACTOR}.ulysses_sequence_parallel_size", f"{sp}: 'num_key_value_heads {kv} must be divisible by "
                  f"ulysses_sp_size {sp} or vise versa' (verl/models/transformers/monkey_patch.py apply_monkey_patch; "
                  f"heads: {src})")
    if read(p.composed, f"{ROLLOUT}.name") == "vllm" and isinstance(tp, int) and tp > 0:
        if h % tp:
            p.add(f"{ROLLOUT}.tensor_model_parallel_size", f"{tp}: vLLM refuses it: 'Total number of attention heads "
                  f"({h}) must be divisible by tensor parallel size ({tp}).' (vllm/config/model.py ModelConfig."
                  f"verify_with_parallel_config; heads: {src})")
        elif kv % tp and tp % kv:
            p.add(f"{ROLLOUT}.tensor_model_parallel_size", f"{tp}: {kv} KV heads split over neither {tp} NPUs nor "
                  "whole copies: vLLM's attention asserts KV heads % TP == 0 or TP % KV heads == 0 "
                  f"(vllm/model_executor/models/qwen3_moe.py Qwen3MoeAttention; heads: {src})")


def _sequence(p: Problems) -> int:
    """The longest sequence: data.max_prompt_length + max_response_length (0 where they are not numbers)."""
    return sum(v for v in (p.number("data.max_prompt_length"), p.number("data.max_response_length")) if v)


def scheduler(p: Problems) -> None:
    if read(p.composed, f"{ROLLOUT}.name") != "vllm":
        return
    tokens, seqs = p.number(f"{ROLLOUT}.max_num_batched_tokens"), p.number(f"{ROLLOUT}.max_num_seqs")
    if tokens is None or seqs is None:
        return
    if tokens < seqs:
        p.add(f"{ROLLOUT}.max_num_batched_tokens", f"{tokens}: vLLM refuses it: 'max_num_batched_tokens ({tokens}) "
              f"must be greater than or equal to max_num_seqs ({seqs}).' (vllm/config/scheduler.py SchedulerConfig)")
    sequence = _sequence(p)
    if read(p.composed, f"{ROLLOUT}.enable_chunked_prefill") is False and tokens < sequence:
        p.add(f"{ROLLOUT}.max_num_batched_tokens", f"{tokens} cannot hold one {sequence}-token sequence with "
              f"{ROLLOUT}.enable_chunked_prefill false: vLLM's scheduler 'reject[s] longer sequences' "
              "(vllm/config/scheduler.py SchedulerConfig; vllm-ascend's AscendSchedulerConfig alike): raise it or "
              "enable chunked prefill")


def fsdp_worker(p: Problems, world: int) -> None:
    """verl/workers/fsdp_workers.py ActorRolloutRefWorker.__init__ (normalisation) and create_device_mesh."""
    sp, mini, n = (p.number(k) for k in (f"{ACTOR}.ulysses_sequence_parallel_size", f"{ACTOR}.ppo_mini_batch_size",
                                         f"{ROLLOUT}.n"))
    if world <= 0:
        return
    if isinstance(sp, int) and sp > 0 and world % sp == 0 and isinstance(mini, int) and isinstance(n, int):
        normalized = mini * n // (world // sp)
        micro = p.number(f"{ACTOR}.ppo_micro_batch_size_per_gpu")
        if normalized <= 0:
            p.add(f"{ACTOR}.ppo_mini_batch_size", f"{mini}: 'ppo_mini_batch_size {normalized} should be larger than 0 "
                  f"after normalization' (x rollout.n {n} / {world // sp} data-parallel ranks; verl/workers/"
                  "fsdp_workers.py ActorRolloutRefWorker.__init__)")
        elif isinstance(micro, int) and micro > 0 and normalized % micro:   # dynamic batch size or not
            p.add(f"{ACTOR}.ppo_micro_batch_size_per_gpu", f"{micro}: 'normalized ppo_mini_batch_size {normalized} "
                  f"should be divisible by ppo_micro_batch_size_per_gpu {micro}' (verl/workers/fsdp_workers.py "
                  "ActorRolloutRefWorker.__init__)")
    for key in (f"{ACTOR}.fsdp_config.fsdp_size", f"{REF}.fsdp_config.fsdp_size"):
        size = p.number(key)
        if isinstance(size, int) and 0 <= size < world and (size == 0 or world % size):
            p.add(key, f"{size} does not divide the world size {world}: verl shards over a ({world} // fsdp_size, "
                  "fsdp_size) device mesh (verl/workers/fsdp_workers.py create_device_mesh); -1 shards over all")


def log_prob_budgets(p: Problems) -> None:
    """verl/utils/seqlen_balancing.py rearrange_micro_batches, for the ref's and the rollout's log-probs (x SP as
    verl/workers/actor/dp_actor.py compute_log_prob)."""
    sequence = _sequence(p)
    actor_budget = read(p.composed, f"{ACTOR}.ppo_max_token_len_per_gpu")
    for section, sp_key in ((REF, f"{REF}.ulysses_sequence_parallel_size"),
                            (ROLLOUT, f"{ACTOR}.ulysses_sequence_parallel_size")):
        budget, sp = p.number(f"{section}.log_prob_max_token_len_per_gpu"), read(p.composed, sp_key) or 1
        if not read(p.composed, f"{section}.log_prob_use_dynamic_bsz") or budget is None or budget == actor_budget:
            continue
        if isinstance(sp, int) and budget * sp < sequence:
            p.add(f"{section}.log_prob_max_token_len_per_gpu", f"{budget} x SP {sp} cannot hold one {sequence}-token "
                  "sequence: 'max_token_len must be greater than the sequence length' (verl/utils/seqlen_balancing.py "
                  "rearrange_micro_batches)")


def registered_reward_managers() -> set[str] | None:
    """The names verl/workers/reward_manager/*.py register (@register("name")), read from the installed verl."""
    root = verl_root()
    if root is None:
        return None
    names = set()
    for path in sorted((root / "workers" / "reward_manager").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register" and node.args and \
                    isinstance(node.args[0], ast.Constant):
                names.add(node.args[0].value)
    return names


def recipe(p: Problems) -> None:
    strategy, critic = read(p.composed, f"{ACTOR}.strategy"), read(p.composed, "critic.strategy")
    if strategy not in ("fsdp", "fsdp2", "megatron"):
        p.add(f"{ACTOR}.strategy", f"{strategy!r}: recipe/dapo/main_dapo.py TaskRunner.run raises NotImplementedError "
              "for anything but fsdp, fsdp2 and megatron")
    elif strategy in ("fsdp", "fsdp2") and critic not in ("fsdp", "fsdp2") or strategy == "megatron" != critic:
        p.add("critic.strategy", f"{critic!r} does not go with {ACTOR}.strategy {strategy!r}: recipe/dapo/main_dapo.py "
              "TaskRunner.run asserts it before building the workers")
    rollout = read(p.composed, f"{ROLLOUT}.name")
    if rollout not in ("vllm", "sglang"):
        p.add(f"{ROLLOUT}.name", f"{rollout!r}: 'Unknown rollout mode: {rollout}. Available: ['vllm', 'sglang']' "
              "(verl/workers/rollout/replica.py RolloutReplicaRegistry.get)")
    elif rollout != "vllm":
        p.add(f"{ROLLOUT}.name", f"{rollout!r}: the stack installs vLLM and vllm-ascend only (stack/manifest.yml)")
    names, manager = registered_reward_managers(), read(p.composed, "reward_manager.name")
    if names and read(p.composed, "reward_manager.source") == "register" and str(manager) not in names:
        p.add("reward_manager.name", f"{manager!r}: 'Reward manager is not registered' (verl/trainer/config/config.py "
              f"RewardManagerConfig.__post_init__; registered: {', '.join(sorted(names))})")
    buffer = read(p.composed, "reward_model.overlong_buffer.len")
    response = read(p.composed, "data.max_response_length")
    if manager == "dapo" and isinstance(buffer, int) and isinstance(response, int) and response < buffer:
        p.add("reward_model.overlong_buffer.len", f"{buffer} is longer than data.max_response_length {response}: "
              "'max_resp_len must be larger than overlong_buffer.len' (verl/workers/reward_manager/dapo.py "
              "DAPORewardManager.__init__)")
    _finite(p, f"{ACTOR}.clip_ratio_c", lambda v: v > 1, "must be > 1: 'The lower bound of the clip_ratio_c for "
            "dual-clip PPO should be greater than 1.0' (verl/trainer/ppo/core_algos.py compute_policy_loss_vanilla)")
    metric = read(p.composed, "algorithm.filter_groups.metric")
    if read(p.composed, "algorithm.filter_groups.enable") and not (isinstance(metric, str) and metric):
        p.add("algorithm.filter_groups.metric", f"{metric!r}: filter_groups.enable needs a metric to filter on "
              "(recipe/dapo/dapo_ray_trainer.py fit reads new_batch.non_tensor_batch[metric])")


def loggers(p: Problems, supported: list[str] | None) -> None:
    names = read(p.composed, "trainer.logger")
    for name in [names] if isinstance(names, str) else names if isinstance(names, list) else []:
        if supported is not None and name != "tracking" and name not in supported:
            p.add("trainer.logger", f"has {name!r}: verl's Tracking asserts '{name} is not supported' (verl/utils/"
                  f"tracking.py; supported: {', '.join(supported)})")


def paths(p: Problems) -> None:
    """The spec's paths must be absolute on the nodes (dapo_ops/job/spec.py check_strings); so must an override's."""
    for key in (f"{AR}.model.path", "data.train_files", "data.val_files", "trainer.default_local_dir"):
        value = read(p.composed, key)
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) and v.startswith("/") for v in values):
            p.add(key, f"{value!r} must be an absolute path on the nodes")


def verl_checks(folded: Folded, composed: dict, facts: ModelFacts) -> list[str]:
    """Every check above on the composed configuration; `folded` is the placed spec with the composed values."""
    verl_problems, supported = run_verl_checks(composed)
    p = Problems(folded, composed, verl_problems)
    world = folded.spec.cluster.nodes * (folded.spec.cluster.npus_per_node or 0)
    heads(p, facts)
    for check in (scheduler, log_prob_budgets, recipe, ranges, paths):
        check(p)
    fsdp_worker(p, world)
    loggers(p, supported)
    return p.lines  # the spec's own Ray ports are checked when it is read (spec.check_ports)
