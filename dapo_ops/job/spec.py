"""The DAPO job spec: a typed model of jobs/*.yaml; unknown fields and wrong types are rejected with the field named."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dapo_ops.job import strings
from dapo_ops.job.typed import SpecError, build


@dataclass(frozen=True)
class ModelArchitecture:
    """The numbers the checks and the memory estimate need. In a spec every field is optional: the model's
    config.json (or the table of known models) gives them, and a field set here overrides it
    (dapo_ops/job/model_facts.py); after that every field is known."""

    parameters_b: float | None = None   # total parameters, billions (counted from the rest when not given)
    layers: int | None = None
    hidden_size: int | None = None
    attention_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    experts: int | None = None                 # routed experts (0: dense)
    experts_per_token: int | None = None
    moe_intermediate_size: int | None = None
    intermediate_size: int | None = None
    max_position_embeddings: int | None = None


@dataclass(frozen=True)
class Model:
    path: str
    architecture: ModelArchitecture = field(default_factory=ModelArchitecture)
    use_remove_padding: bool = True
    gradient_checkpointing: bool = True


@dataclass(frozen=True)
class Data:
    train_files: str | tuple[str, ...]   # one parquet file or a list of them, as verl's data.train_files takes
    val_files: str | tuple[str, ...]
    prompt_key: str = "prompt"
    max_prompt_length: int = 2048
    max_response_length: int = 20480
    gen_batch_size: int = 1536
    train_batch_size: int = 512
    truncation: str = "left"

    def paths(self) -> list[tuple[str, str]]:
        """(field, path) for every data file, training then validation."""
        return [(f"data.{name}", path) for name in ("train_files", "val_files")
                for path in ((getattr(self, name),) if isinstance(getattr(self, name), str) else getattr(self, name))]


@dataclass(frozen=True)
class Cluster:
    nodes: int = 2
    npus_per_node: int | None = None    # default: the inventory's NPUS_PER_NODE (8 on an 800T A2, 16 on a Box16)
    head: str | None = None             # inventory host name of the Ray head (default: the first node)
    ray_port: int | None = None         # default: the inventory's RAY_PORTS.gcs (dapo_ops/ray_ports.py)
    dashboard_port: int | None = None   # default: the inventory's RAY_PORTS.dashboard


@dataclass(frozen=True)
class OverlongBuffer:
    enable: bool = True
    len: int = 4096
    penalty_factor: float = 1.0


@dataclass(frozen=True)
class FilterGroups:
    enable: bool = True
    metric: str = "acc"
    max_num_gen_batches: int = 10


@dataclass(frozen=True)
class Algorithm:
    n_responses: int = 16
    ppo_mini_batch_size: int = 32
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    clip_ratio_c: float = 10.0
    loss_agg_mode: str = "token-mean"
    grad_clip: float = 1.0
    lr: float = 1e-6
    lr_warmup_steps: int = 10
    weight_decay: float = 0.1
    overlong_buffer: OverlongBuffer = field(default_factory=OverlongBuffer)
    filter_groups: FilterGroups = field(default_factory=FilterGroups)


@dataclass(frozen=True)
class Actor:
    strategy: str = "fsdp"
    fsdp_size: int = -1
    param_offload: bool = True
    optimizer_offload: bool = True
    ulysses_sequence_parallel_size: int = 8
    use_dynamic_bsz: bool = True
    max_token_len_per_npu: int = 11264  # (prompt + response) / 2, as verl's NPU recipe
    ref_param_offload: bool = True


@dataclass(frozen=True)
class Rollout:
    name: str = "vllm"
    mode: str = "async"
    tensor_parallel_size: int = 2
    gpu_memory_utilization: float = 0.8
    max_num_seqs: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    val_top_p: float = 0.7
    enforce_eager: bool = False
    enable_chunked_prefill: bool = True


@dataclass(frozen=True)
class Trainer:
    project_name: str = "verl-dapo"
    experiment_name: str = "dapo"
    loggers: tuple[str, ...] = ("console", "file")
    total_epochs: int = 1
    test_freq: int = 5
    # the checkpoint policy (dapo_ops/job/checkpoints.py): every save_freq steps (verl's own key; -1 saves none), or
    # every save_every_minutes of training turned into steps with the step time estimate (60 when neither is given)
    save_freq: int | None = None
    save_every_minutes: float | None = None
    keep_checkpoints: int = 2              # trainer.max_actor_ckpt_to_keep: verl prunes older steps before a save
    val_before_train: bool = False
    log_dir: str = "/var/log/dapo-ops/jobs"   # on every node: the file logger's JSONL and tensorboard
    checkpoint_dir: str = "/var/lib/dapo-ops/checkpoints"  # on every node: trainer.default_local_dir's root


@dataclass(frozen=True)
class NpuEnv:
    hccl_connect_timeout: int = 3600
    hccl_exec_timeout: int = 3600
    task_queue_enable: int | None = None       # default: 1 in graph mode, 2 with rollout.enforce_eager (npu_env.py)
    pytorch_npu_alloc_conf: str | None = None  # unset: expandable_segments:True breaks vLLM's sleep mode
    vllm_use_v1: int = 1
    vllm_ascend_enable_nz: int = 0
    # true exports RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1, false unsets it: Ray and verl read any non-empty
    # value, 0 included, as set (Ray `_private/accelerators/npu.py`, verl v0.7.0 `verl/utils/ray_utils.py:26-46`)
    ray_noset_ascend_rt_visible_devices: bool = True
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class JobSpec:
    name: str
    model: Model
    data: Data
    cluster: Cluster = field(default_factory=Cluster)
    algorithm: Algorithm = field(default_factory=Algorithm)
    actor: Actor = field(default_factory=Actor)
    rollout: Rollout = field(default_factory=Rollout)
    trainer: Trainer = field(default_factory=Trainer)
    env: NpuEnv = field(default_factory=NpuEnv)
    extra_overrides: tuple[str, ...] = ()
    # The controller's environment variables the job gets, each as a 0600 file on the nodes (job/secrets.py
    # SECRETS): the only way a secret reaches a job; env.extra refuses names that look like one.
    secrets: tuple[str, ...] = ()




def check_strings(spec: JobSpec) -> None:
    """Fields that become names (files, Ray ids, env variables) must be plain; free text is quoted on render."""
    if not strings.is_name(spec.name):
        raise SpecError(f"name: {spec.name!r} must be letters, digits, '.', '_' or '-' (at most 64)")
    if not strings.is_name(spec.trainer.experiment_name):
        raise SpecError(f"trainer.experiment_name: {spec.trainer.experiment_name!r} must be letters, digits, '.', '_' or '-'")
    if not strings.is_name(spec.trainer.project_name):
        raise SpecError(f"trainer.project_name: {spec.trainer.project_name!r} must be letters, digits, '.', '_' or '-'")
    for key in spec.env.extra:
        if not strings.is_env_name(key):
            raise SpecError(f"env.extra.{key!r}: not an environment variable name (A-Z, 0-9, _)")
        if strings.looks_secret(key):
            raise SpecError(f"env.extra.{key}: looks like a secret, which is never written into the job's files; "
                            "list it under secrets and export it on the controller (launch hands it to the job in "
                            "a 0600 file)")
        problem = strings.env_problem(key, spec.env.extra[key])
        if problem:
            raise SpecError(f"env.extra.{key}: {problem}")
    for i, value in enumerate(spec.extra_overrides):
        if "\n" in value or "=" not in value:
            raise SpecError(f"extra_overrides[{i}]: {value!r} is not one Hydra override 'key=value'")
    for path, value in (("model.path", spec.model.path), *spec.data.paths(), ("trainer.log_dir", spec.trainer.log_dir),
                        ("trainer.checkpoint_dir", spec.trainer.checkpoint_dir)):
        if "\n" in value or "\0" in value:
            raise SpecError(f"{path}: must be one line")
        if not value.startswith("/"):
            raise SpecError(f"{path}: {value!r} must be an absolute path on the nodes")
        problem = strings.path_problem(value)
        if problem:
            raise SpecError(f"{path}: {problem}")


def check_ports(spec: JobSpec) -> None:
    c = spec.cluster
    for name, port in (("cluster.ray_port", c.ray_port), ("cluster.dashboard_port", c.dashboard_port)):
        if port is not None and not 1 <= port <= 65535:
            raise SpecError(f"{name}: {port} is not a TCP port (1-65535)")
    if c.ray_port is not None and c.ray_port == c.dashboard_port:
        raise SpecError(f"cluster.dashboard_port: {c.dashboard_port} is also cluster.ray_port")


def parse_spec(data: Any) -> JobSpec:
    spec = build(JobSpec, data, "")
    check_strings(spec)
    check_ports(spec)
    return spec


def load_spec(path: Path | str) -> JobSpec:
    """Read by dapo_ops.userfile's rules (size, UTF-8, no aliases, YAML 1.2 numbers and booleans, no duplicate
    keys); every refusal is one line naming the file, line and column."""
    from dapo_ops.userfile import UserFileError, load_yaml

    try:
        data = load_yaml(path, what="job spec")
    except UserFileError as exc:
        raise SpecError(str(exc)) from None
    try:
        return parse_spec(data)
    except SpecError as exc:
        if exc.at is None:
            raise
        raise SpecError(f"job spec {path}:{exc.at[0]}:{exc.at[1]}: {exc}") from None
