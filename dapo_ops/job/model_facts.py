"""The model's attention heads, KV heads, hidden size and context length, which verl's and vLLM's start-up checks read
from the model's config.json (pure, except for reading that file).

Where they come from, first found wins:
1. `<actor_rollout_ref.model.path>/config.json` when the controller can read it (the model is on a local or shared
   disk): what verl reads (verl/workers/config/model.py HFModelConfig: AutoConfig.from_pretrained), `text_config`
   for a vision-language model as verl/models/transformers/monkey_patch.py does;
2. the spec's `model.architecture` (dapo_ops/job/spec.py; required there today);
3. KNOWN below, by the model directory's name.
verl applies `actor_rollout_ref.model.override_config` to the Hugging Face config (HFModelConfig.__post_init__:
update_model_config), so its keys win over all three.
Where config.json, or else KNOWN, disagrees with the spec's model.architecture, a warning says so; the checks and the
HBM estimate use the first found.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from dapo_ops.job.composed import AR, read
from dapo_ops.job.spec import JobSpec, SpecError

# Hugging Face config.json key -> ModelArchitecture field
CONFIG_KEYS = {"num_attention_heads": "attention_heads", "num_key_value_heads": "kv_heads",
               "hidden_size": "hidden_size", "max_position_embeddings": "max_position_embeddings"}


@dataclass(frozen=True)
class Known:
    attention_heads: int
    kv_heads: int
    hidden_size: int
    max_position_embeddings: int
    source: str


def _hf(name: str) -> str:
    return f"https://huggingface.co/Qwen/{name}/blob/main/config.json"


# The values of each model's config.json on Hugging Face (num_attention_heads, num_key_value_heads, hidden_size,
# max_position_embeddings): the seed job's model and the models of verl's DAPO NPU scripts (verl v0.7.0
# recipe/dapo/run_dapo_qwen3_8b_base_npu.sh and its siblings).
KNOWN = {
    "Qwen3-30B-A3B": Known(32, 4, 2048, 40960, _hf("Qwen3-30B-A3B")),
    "Qwen3-30B-A3B-Base": Known(32, 4, 2048, 32768, _hf("Qwen3-30B-A3B-Base")),
    "Qwen3-8B-Base": Known(32, 8, 4096, 32768, _hf("Qwen3-8B-Base")),
    "Qwen3-14B-Base": Known(40, 8, 5120, 32768, _hf("Qwen3-14B-Base")),
    "Qwen2.5-7B-Instruct": Known(28, 4, 3584, 32768, _hf("Qwen2.5-7B-Instruct")),
    "Qwen2.5-32B": Known(40, 8, 5120, 131072, _hf("Qwen2.5-32B")),
}


@dataclass
class ModelFacts:
    attention_heads: int
    kv_heads: int
    hidden_size: int
    max_position_embeddings: int
    source: str                                   # where the numbers came from, for messages
    warnings: list[str] = field(default_factory=list)


def read_config_json(model_path: str) -> dict | None:
    """The model's config.json (its text_config for a vision-language model), or None when it cannot be read."""
    try:
        data = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    text = data.get("text_config")
    if "num_attention_heads" not in data and isinstance(text, dict):
        data = text
    values = {f: data.get(k) for k, f in CONFIG_KEYS.items()}
    if values["kv_heads"] is None:                # Hugging Face's default: as many KV heads as attention heads
        values["kv_heads"] = values["attention_heads"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values.values()):
        return None
    return values


def _disagreements(spec: JobSpec, values: dict, source: str, used: str) -> list[str]:
    arch = spec.model.architecture
    return [f"model.architecture.{f} is {getattr(arch, f)} but {source} says {values[f]} (dapo-ops uses {used})"
            for f in CONFIG_KEYS.values() if values[f] != getattr(arch, f)]


def _values(spec: JobSpec, path: str) -> tuple[dict, str, list[str]]:
    """The facts, where they came from, and the warnings about the spec's architecture."""
    name = Path(path).name
    from_file = read_config_json(path)
    if from_file is not None:
        source = f"{path}/config.json"
        return from_file, source, _disagreements(spec, from_file, source, "config.json's")
    known = KNOWN.get(name)
    if spec.model.architecture is not None:
        values = {f: getattr(spec.model.architecture, f) for f in CONFIG_KEYS.values()}
        warnings = _disagreements(spec, dataclasses.asdict(known), f"{name}'s config.json ({known.source})",
                                  "the architecture's") if known else []
        return values, "model.architecture", warnings
    if known is None:   # unreachable while dapo_ops/job/spec.py requires model.architecture
        raise SpecError(f"model.architecture: required for {name} (known models: {', '.join(KNOWN)})")
    return dataclasses.asdict(known), known.source, []


def model_facts(spec: JobSpec, composed: dict | None) -> ModelFacts:
    path = read(composed, f"{AR}.model.path", spec.model.path)
    values, source, warnings = _values(spec, path if isinstance(path, str) else spec.model.path)
    overridden = read(composed, f"{AR}.model.override_config", {})
    for key, name in CONFIG_KEYS.items():
        if isinstance(overridden, dict) and isinstance(overridden.get(key), int):
            values[name] = overridden[key]
    return ModelFacts(**{f: values[f] for f in CONFIG_KEYS.values()}, source=source, warnings=warnings)


def with_facts(spec: JobSpec, facts: ModelFacts) -> JobSpec:
    """The spec with the model's facts in its architecture (what the arithmetic and the HBM estimate read)."""
    arch = dataclasses.replace(spec.model.architecture, **{f: getattr(facts, f) for f in CONFIG_KEYS.values()})
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, architecture=arch))
