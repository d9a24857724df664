"""The DAPO job spec as verl Hydra overrides (pure). The stack manifest's verl pin selects the key names."""

from __future__ import annotations

import re

from packaging.version import Version

from dapo_ops.job.checkpoints import CheckpointRun, policy, run_pairs
from dapo_ops.job.spec import JobSpec
from dapo_ops.manifest import StackManifest

# `+key=value` adds a key the schema does not have; only these prefixes may do that.
# Where verl reads each: v0.7.0 verl/workers/fsdp_workers.py reads override_config (as override_model_config) and
# fsdp_config.get("mixed_precision") for the actor's and the reference's FSDP wrap;
# v0.7.0 verl/workers/rollout/vllm_rollout/vllm_async_server.py passes engine_kwargs.vllm to vLLM's engine.
PLUS_ALLOWED = (
    "+actor_rollout_ref.model.override_config.",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.",
    "+actor_rollout_ref.ref.fsdp_config.mixed_precision.",
    "+actor_rollout_ref.rollout.engine_kwargs.vllm.",
)
_SAFE = re.compile(r"[A-Za-z0-9_./:+@-]+")


def hydra_value(value) -> str:
    """A Python value as a Hydra override value (strings quoted when they hold anything but plain characters)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _SAFE.fullmatch(text) and text not in ("True", "False", "null", "true", "false"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def reward_overrides(spec: JobSpec, verl_version: str, reward_keys_moved_in: str) -> list[tuple[str, object]]:
    """verl moved the reward settings to `reward.*` (docs/verl-dapo.md §3.1); the manifest says when."""
    buffer = spec.algorithm.overlong_buffer
    if Version(verl_version) >= Version(reward_keys_moved_in):
        return [("reward.reward_manager.name", "dapo"),
                ("reward.reward_kwargs.overlong_buffer_cfg.enable", buffer.enable),
                ("reward.reward_kwargs.overlong_buffer_cfg.len", buffer.len),
                ("reward.reward_kwargs.overlong_buffer_cfg.penalty_factor", buffer.penalty_factor),
                ("reward.reward_kwargs.max_resp_len", spec.data.max_response_length)]
    return [("reward_model.reward_manager", "dapo"),
            ("reward_model.overlong_buffer.enable", buffer.enable),
            ("reward_model.overlong_buffer.len", buffer.len),
            ("reward_model.overlong_buffer.penalty_factor", buffer.penalty_factor)]


def override_pairs(spec: JobSpec, verl_version: str, rules: dict,
                   run: CheckpointRun | None = None) -> list[tuple[str, object]]:
    d, a, act, r, t = spec.data, spec.algorithm, spec.actor, spec.rollout, spec.trainer
    seq = d.max_prompt_length + d.max_response_length
    ar = "actor_rollout_ref"
    saving = policy(spec)
    return [
        ("data.train_files", d.train_files), ("data.val_files", d.val_files), ("data.prompt_key", d.prompt_key),
        ("data.truncation", d.truncation), ("data.max_prompt_length", d.max_prompt_length),
        ("data.max_response_length", d.max_response_length), ("data.gen_batch_size", d.gen_batch_size),
        ("data.train_batch_size", d.train_batch_size),
        ("algorithm.adv_estimator", "grpo"), ("algorithm.use_kl_in_reward", False), ("algorithm.kl_ctrl.kl_coef", 0.0),
        ("algorithm.filter_groups.enable", a.filter_groups.enable),
        ("algorithm.filter_groups.metric", a.filter_groups.metric),
        ("algorithm.filter_groups.max_num_gen_batches", a.filter_groups.max_num_gen_batches),
        (f"{ar}.model.path", spec.model.path), (f"{ar}.model.use_remove_padding", spec.model.use_remove_padding),
        (f"{ar}.model.enable_gradient_checkpointing", spec.model.gradient_checkpointing),
        (f"+{ar}.model.override_config.attention_dropout", 0.0),
        (f"+{ar}.model.override_config.embd_pdrop", 0.0),
        (f"+{ar}.model.override_config.resid_pdrop", 0.0),
        (f"{ar}.actor.strategy", act.strategy),
        (f"{ar}.actor.use_kl_loss", False), (f"{ar}.actor.kl_loss_coef", 0.0),
        (f"{ar}.actor.clip_ratio_low", a.clip_ratio_low), (f"{ar}.actor.clip_ratio_high", a.clip_ratio_high),
        (f"{ar}.actor.clip_ratio_c", a.clip_ratio_c), (f"{ar}.actor.loss_agg_mode", a.loss_agg_mode),
        (f"{ar}.actor.use_dynamic_bsz", act.use_dynamic_bsz),
        (f"{ar}.actor.ppo_max_token_len_per_gpu", act.max_token_len_per_npu),
        (f"{ar}.actor.ppo_mini_batch_size", a.ppo_mini_batch_size), (f"{ar}.actor.entropy_coeff", 0),
        (f"{ar}.actor.grad_clip", a.grad_clip),
        (f"{ar}.actor.ulysses_sequence_parallel_size", act.ulysses_sequence_parallel_size),
        (f"{ar}.actor.use_torch_compile", False),
        (f"{ar}.actor.optim.lr", a.lr), (f"{ar}.actor.optim.lr_warmup_steps", a.lr_warmup_steps),
        (f"{ar}.actor.optim.weight_decay", a.weight_decay),
        (f"{ar}.actor.fsdp_config.param_offload", act.param_offload),
        (f"{ar}.actor.fsdp_config.optimizer_offload", act.optimizer_offload),
        (f"{ar}.actor.fsdp_config.forward_prefetch", False), (f"{ar}.actor.fsdp_config.fsdp_size", act.fsdp_size),
        (f"{ar}.ref.log_prob_use_dynamic_bsz", act.use_dynamic_bsz),
        (f"{ar}.ref.log_prob_max_token_len_per_gpu", act.max_token_len_per_npu),
        (f"{ar}.ref.ulysses_sequence_parallel_size", act.ulysses_sequence_parallel_size),
        (f"{ar}.ref.use_torch_compile", False), (f"{ar}.ref.fsdp_config.param_offload", act.ref_param_offload),
        (f"{ar}.ref.fsdp_config.forward_prefetch", False),
        (f"{ar}.rollout.name", r.name), (f"{ar}.rollout.mode", r.mode), (f"{ar}.rollout.n", a.n_responses),
        (f"{ar}.rollout.log_prob_use_dynamic_bsz", act.use_dynamic_bsz),
        (f"{ar}.rollout.log_prob_max_token_len_per_gpu", act.max_token_len_per_npu),
        (f"{ar}.rollout.gpu_memory_utilization", r.gpu_memory_utilization),
        (f"{ar}.rollout.tensor_model_parallel_size", r.tensor_parallel_size),
        (f"{ar}.rollout.max_num_seqs", r.max_num_seqs), (f"{ar}.rollout.max_num_batched_tokens", seq),
        (f"{ar}.rollout.enable_chunked_prefill", r.enable_chunked_prefill),
        (f"{ar}.rollout.temperature", r.temperature), (f"{ar}.rollout.top_p", r.top_p),
        (f"{ar}.rollout.top_k", r.top_k), (f"{ar}.rollout.enforce_eager", r.enforce_eager),
        (f"{ar}.rollout.free_cache_engine", True),
        (f"{ar}.rollout.val_kwargs.temperature", r.temperature), (f"{ar}.rollout.val_kwargs.top_p", r.val_top_p),
        (f"{ar}.rollout.val_kwargs.top_k", r.top_k), (f"{ar}.rollout.val_kwargs.do_sample", True),
        (f"{ar}.rollout.val_kwargs.n", 1),
        *reward_overrides(spec, verl_version, str(rules["reward_keys_moved_in"])),
        ("trainer.logger", list(t.loggers)), ("trainer.project_name", t.project_name),
        ("trainer.experiment_name", t.experiment_name), ("trainer.n_gpus_per_node", spec.cluster.npus_per_node),
        ("trainer.nnodes", spec.cluster.nodes), ("trainer.val_before_train", t.val_before_train),
        ("trainer.test_freq", t.test_freq), ("trainer.save_freq", saving.save_freq),
        ("trainer.max_actor_ckpt_to_keep", saving.keep),
        ("trainer.total_epochs", t.total_epochs), ("trainer.device", "npu"),
        *run_pairs(spec, run),
    ]


def overrides(spec: JobSpec, manifest: StackManifest, verl_version: str | None = None,
              run: CheckpointRun | None = None) -> list[str]:
    """Every override as `key=value` for the pinned verl (or `verl_version`), then the spec's extra raw overrides
    (which win, as the last ones do). `run`: a launched attempt's checkpoint chain and resume step."""
    verl = manifest.source("verl")
    pairs = override_pairs(spec, verl_version or verl.version, verl.extra["rules"], run)
    return [f"{key}={hydra_value(value)}" for key, value in pairs] + list(spec.extra_overrides)


def extra_override_problems(spec: JobSpec) -> list[str]:
    """Each of the spec's extra_overrides that Hydra cannot parse, named by its index (a value with shell or Hydra
    syntax in it must be quoted: key='value')."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser, problems = OverridesParser.create(), []
    for index, text in enumerate(spec.extra_overrides):
        try:
            parser.parse_overrides([text])
        except HydraException as exc:
            reason = (str(exc).strip().splitlines() or ["not a Hydra override"])[0]
            problems.append(f"extra_overrides[{index}]: {text!r} is not a Hydra override ({reason}); quote the value: "
                            "key='...'")
    return problems
