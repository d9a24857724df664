"""The composed configuration read back at verl's own keys (pure).

The spec's fields become verl keys (overrides.override_pairs), and the spec's `extra_overrides` come last and may
change any of them. So the checks read what verl will read: `fold` puts the composed value of each verl key back on
the spec field it came from, and names the field by its verl key when an override changed it, so that a message
points at what the user wrote. A composed value of the wrong type (a mini-batch of `banana`) is a problem of its own
and the spec's value is kept for the other checks.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from dapo_ops.job.spec import JobSpec
from dapo_ops.model.variables import NPUS_PER_NODE

AR = "actor_rollout_ref"
# spec field -> the verl key overrides.override_pairs writes it to (the first, where it writes several)
FIELDS = {
    "cluster.nodes": "trainer.nnodes",
    "cluster.npus_per_node": "trainer.n_gpus_per_node",
    "model.path": f"{AR}.model.path",
    "model.use_remove_padding": f"{AR}.model.use_remove_padding",
    "model.gradient_checkpointing": f"{AR}.model.enable_gradient_checkpointing",
    "data.max_prompt_length": "data.max_prompt_length",
    "data.max_response_length": "data.max_response_length",
    "data.gen_batch_size": "data.gen_batch_size",
    "data.train_batch_size": "data.train_batch_size",
    "algorithm.n_responses": f"{AR}.rollout.n",
    "algorithm.ppo_mini_batch_size": f"{AR}.actor.ppo_mini_batch_size",
    "algorithm.loss_agg_mode": f"{AR}.actor.loss_agg_mode",
    "algorithm.lr": f"{AR}.actor.optim.lr",
    "algorithm.overlong_buffer.enable": "reward_model.overlong_buffer.enable",   # verl < 0.7.1 (overrides.py)
    "algorithm.overlong_buffer.len": "reward_model.overlong_buffer.len",
    "algorithm.overlong_buffer.penalty_factor": "reward_model.overlong_buffer.penalty_factor",
    "algorithm.filter_groups.enable": "algorithm.filter_groups.enable",
    "algorithm.filter_groups.max_num_gen_batches": "algorithm.filter_groups.max_num_gen_batches",
    "actor.ulysses_sequence_parallel_size": f"{AR}.actor.ulysses_sequence_parallel_size",
    "actor.use_dynamic_bsz": f"{AR}.actor.use_dynamic_bsz",
    "actor.max_token_len_per_npu": f"{AR}.actor.ppo_max_token_len_per_gpu",
    "actor.param_offload": f"{AR}.actor.fsdp_config.param_offload",
    "actor.optimizer_offload": f"{AR}.actor.fsdp_config.optimizer_offload",
    "actor.ref_param_offload": f"{AR}.ref.fsdp_config.param_offload",
    "rollout.name": f"{AR}.rollout.name",
    "rollout.mode": f"{AR}.rollout.mode",
    "rollout.tensor_parallel_size": f"{AR}.rollout.tensor_model_parallel_size",
    "rollout.gpu_memory_utilization": f"{AR}.rollout.gpu_memory_utilization",
    "trainer.loggers": "trainer.logger",
}
PLACED = {"cluster.nodes": "node(s)", "cluster.npus_per_node": "NPUs per node"}
KINDS = {int: "a whole number", float: "a number", bool: "true or false", str: "a string",
         tuple: "a list of strings"}
_MISSING = object()


def read(composed: dict | None, key: str, default: Any = None) -> Any:
    """The composed value at a dotted verl key, or `default`."""
    node: Any = composed or {}
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


@dataclass
class Folded:
    spec: JobSpec
    names: dict[str, str] = field(default_factory=dict)   # spec field -> verl key, where an override changed it
    problems: list[str] = field(default_factory=list)

    def name(self, path: str) -> str:
        return self.names.get(path, path)


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _hint(path: str) -> Any:
    """The spec field's type (Optional unwrapped)."""
    cls: Any = JobSpec
    for part in path.split("."):
        cls = typing.get_type_hints(cls)[part]
    if typing.get_origin(cls) in (types.UnionType, typing.Union):
        cls = next(a for a in typing.get_args(cls) if a is not type(None))
    return typing.get_origin(cls) or cls


def _typed(value: Any, hint: Any) -> Any:
    """The composed value as the spec field's type, or _MISSING when it is not one."""
    if hint is tuple:
        value = [value] if isinstance(value, str) else value   # verl's Tracking takes one logger name as a string
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return tuple(value) if ok else _MISSING
    if hint is bool:
        return value if isinstance(value, bool) else _MISSING
    if isinstance(value, bool):
        return _MISSING
    if hint is float:
        return float(value) if isinstance(value, (int, float)) else _MISSING
    return value if isinstance(value, hint) else _MISSING


def _replace(obj: Any, path: str, value: Any) -> Any:
    head, _, rest = path.partition(".")
    if not rest:
        return dataclasses.replace(obj, **{head: value})
    return dataclasses.replace(obj, **{head: _replace(getattr(obj, head), rest, value)})


def fold(spec: JobSpec, composed: dict | None) -> Folded:
    """`spec` with the composed values at verl's keys (`spec` is placed: its nodes and NPUs are the inventory's)."""
    folded = Folded(spec)
    if composed is None:
        return folded
    for path, key in FIELDS.items():
        raw = read(composed, key, _MISSING)
        if raw is _MISSING:
            continue
        hint = _hint(path)
        value = _typed(raw, hint)
        if value is _MISSING:
            folded.problems.append(f"{key}: expected {KINDS[hint]}, got {raw!r}")
            continue
        own = _get(spec, path)
        if value != own and not (value != value and own != own):   # x != x: NaN, which the spec may hold too
            folded.names[path] = key
        folded.spec = _replace(folded.spec, path, value)
    for path, what in PLACED.items():
        if path in folded.names:
            folded.problems.append(f"{FIELDS[path]} is overridden to {_get(folded.spec, path)} but the job is placed "
                                   f"on {_get(spec, path)} {what} of the inventory: remove the override (cluster.nodes "
                                   f"and the inventory's {NPUS_PER_NODE} decide)")
    return folded
