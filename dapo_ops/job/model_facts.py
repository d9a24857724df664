"""The model's architecture (layers, heads, KV heads, hidden size, vocabulary, experts, context length, parameters),
which verl's and vLLM's start-up checks and the memory estimate read (pure, except for reading config.json).

Where each number comes from, later wins:
1. the model's config.json, which verl reads (verl/workers/config/model.py HFModelConfig: AutoConfig.from_pretrained;
   `text_config` for a vision-language model as verl/models/transformers/monkey_patch.py does): `--model-config FILE`
   when given, else `<actor_rollout_ref.model.path>/config.json` when the controller can read it, else KNOWN below
   by the model directory's name;
2. the spec's `model.architecture`, field by field (optional): a value there overrides, and where it disagrees with
   (1) a warning names both;
3. `actor_rollout_ref.model.override_config`, which verl applies to the Hugging Face config
   (HFModelConfig.__post_init__: update_model_config).
`parameters_b` is counted from the architecture (embeddings, attention, MLP or experts and router, norms; biases
and shared experts left out) unless the spec gives it. A number none of these give is a SpecError naming it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from dapo_ops.job.composed import AR, read
from dapo_ops.job.spec import JobSpec, ModelArchitecture, SpecError

# config.json key(s) -> ModelArchitecture field (the first key present wins)
CONFIG_KEYS = {
    "layers": ("num_hidden_layers",),
    "hidden_size": ("hidden_size",),
    "attention_heads": ("num_attention_heads",),
    "kv_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "vocab_size": ("vocab_size",),
    "experts": ("num_experts", "n_routed_experts", "num_local_experts"),
    "experts_per_token": ("num_experts_per_tok",),
    "moe_intermediate_size": ("moe_intermediate_size",),
    "intermediate_size": ("intermediate_size",),
    "max_position_embeddings": ("max_position_embeddings",),
}
REQUIRED = ("layers", "hidden_size", "attention_heads", "kv_heads", "head_dim", "vocab_size",
            "max_position_embeddings")


def _hf(name: str) -> str:
    return f"https://huggingface.co/Qwen/{name}/blob/main/config.json"


def _qwen(layers, hidden, heads, kv, vocab, intermediate, context, **moe) -> dict:
    return {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": 128, "vocab_size": vocab, "intermediate_size": intermediate,
            "max_position_embeddings": context, "tie_word_embeddings": False, **moe}


_QWEN3_MOE = {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768}

# Each model's config.json on Hugging Face (the keys above): the seed job's model and the models of verl's DAPO NPU
# scripts (verl v0.7.0 recipe/dapo/run_dapo_qwen3_8b_base_npu.sh and its siblings).
KNOWN = {
    "Qwen3-30B-A3B": (_qwen(48, 2048, 32, 4, 151936, 6144, 40960, **_QWEN3_MOE), _hf("Qwen3-30B-A3B")),
    "Qwen3-30B-A3B-Base": (_qwen(48, 2048, 32, 4, 151936, 6144, 32768, **_QWEN3_MOE), _hf("Qwen3-30B-A3B-Base")),
    "Qwen3-8B-Base": (_qwen(36, 4096, 32, 8, 151936, 12288, 32768), _hf("Qwen3-8B-Base")),
    "Qwen3-14B-Base": (_qwen(40, 5120, 40, 8, 151936, 17408, 32768), _hf("Qwen3-14B-Base")),
    "Qwen2.5-7B-Instruct": (_qwen(28, 3584, 28, 4, 152064, 18944, 32768), _hf("Qwen2.5-7B-Instruct")),
    "Qwen2.5-32B": (_qwen(64, 5120, 40, 8, 152064, 27648, 131072), _hf("Qwen2.5-32B")),
}


@dataclass
class ModelFacts:
    architecture: ModelArchitecture               # every field known
    source: str                                   # where the numbers came from, for messages
    warnings: list[str] = field(default_factory=list)

    @property
    def attention_heads(self) -> int:
        return self.architecture.attention_heads

    @property
    def kv_heads(self) -> int:
        return self.architecture.kv_heads


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def from_config(data: dict) -> tuple[dict, bool]:
    """A Hugging Face config.json (its text_config for a vision-language model) -> (the architecture's fields it
    gives, whether the embeddings are tied)."""
    text = data.get("text_config")
    if "num_attention_heads" not in data and isinstance(text, dict):
        data = text
    values = {}
    for name, keys in CONFIG_KEYS.items():
        value = next((data[k] for k in keys if k in data), None)
        if _int(value):
            values[name] = value
    if "kv_heads" not in values and "attention_heads" in values:   # Hugging Face's default: as many as heads
        values["kv_heads"] = values["attention_heads"]
    if "head_dim" not in values and values.get("attention_heads") and "hidden_size" in values:
        values["head_dim"] = values["hidden_size"] // values["attention_heads"]
    return values, bool(data.get("tie_word_embeddings", False))


def read_config_json(path: Path) -> dict | None:
    """The file's JSON object, or None when the controller cannot read it as one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def count_parameters(v: dict, tied: bool = False) -> float:
    """Parameters, in billions, of a decoder with these fields: embeddings (and an untied head), per layer q/k/v/o,
    the MLP (3 matrices) or the experts' MLPs and the router, and two norms."""
    h, heads, kv, hd = v["hidden_size"], v["attention_heads"], v["kv_heads"], v["head_dim"]
    attention = 2 * h * heads * hd + 2 * h * kv * hd
    if v.get("experts"):
        mlp = v["experts"] * 3 * h * v.get("moe_intermediate_size", 0) + h * v["experts"]
    else:
        mlp = 3 * h * v.get("intermediate_size", 0)
    total = v["layers"] * (attention + mlp + 2 * h) + v["vocab_size"] * h * (1 if tied else 2) + h
    return round(total / 1e9, 3)


def _base(spec: JobSpec, path: str, model_config: Path | None) -> tuple[dict, bool, str | None]:
    """The numbers of the model's config.json (or the known one), whether it ties its embeddings, its name."""
    candidates = [model_config] if model_config is not None else [Path(path) / "config.json"]
    for candidate in candidates:
        data = read_config_json(candidate)
        if data is not None:
            values, tied = from_config(data)
            return values, tied, str(candidate)
    if model_config is not None:
        raise SpecError(f"--model-config {model_config}: not a readable JSON object (a model's config.json)")
    known = KNOWN.get(Path(path).name)
    if known is not None:
        values, tied = from_config(known[0])
        return values, tied, f"{Path(path).name}'s config.json ({known[1]})"
    return {}, False, None


def _overridden(values: dict, composed: dict | None) -> dict:
    """The values with override_config's keys applied, as verl applies them to the Hugging Face config."""
    overridden = read(composed, f"{AR}.model.override_config", {})
    if not isinstance(overridden, dict):
        return values
    for name, keys in CONFIG_KEYS.items():
        value = next((overridden[k] for k in keys if k in overridden), None)
        if _int(value):
            values[name] = value
    return values


def _missing(values: dict) -> list[str]:
    """The numbers the checks need that nobody gave (the MLP width only when the parameters must be counted)."""
    missing = [name for name in REQUIRED if name not in values]
    if missing or "parameters_b" in values:
        return missing
    width = "moe_intermediate_size" if values.get("experts") else "intermediate_size"
    return [width] if width not in values else []


def model_facts(spec: JobSpec, composed: dict | None, model_config: Path | None = None) -> ModelFacts:
    path = read(composed, f"{AR}.model.path", spec.model.path)
    path = path if isinstance(path, str) else spec.model.path
    base, tied, source = _base(spec, path, model_config)
    given = {f.name: getattr(spec.model.architecture, f.name) for f in dataclasses.fields(ModelArchitecture)
             if getattr(spec.model.architecture, f.name) is not None}
    warnings = [f"model.architecture.{name} is {value} but {source} says {base[name]} (dapo-ops uses the spec's)"
                for name, value in given.items() if name in base and base[name] != value]
    values = _overridden({**base, **given}, composed)
    missing = _missing(values)
    if missing:
        where = source or f"{path}/config.json (not readable here)"
        raise SpecError(f"model.architecture: {', '.join(missing)} not known from {where}: pass --model-config with "
                        f"a copy of the model's config.json, or set them under model.architecture in the spec")
    for name in ("experts", "experts_per_token", "moe_intermediate_size", "intermediate_size"):
        values.setdefault(name, 0)                       # a dense model's
    if "parameters_b" not in values:
        values["parameters_b"] = count_parameters(values, tied)
    used = source if not given else (f"{source} and model.architecture" if source else "model.architecture")
    return ModelFacts(ModelArchitecture(**values), used, warnings)


def with_facts(spec: JobSpec, facts: ModelFacts) -> JobSpec:
    """The spec with the model's whole architecture (what the arithmetic and the memory estimate read)."""
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, architecture=facts.architecture))
