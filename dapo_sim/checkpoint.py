"""The staged model's weights (pure): a sharded safetensors checkpoint in the layout a Hugging Face model directory
has, small, for `dapo-sim stage` (dapo_sim/stage.py)."""

from __future__ import annotations

import json
import random


SHARDS = 2
FILL_SEED = 23       # the large tensors' bytes (weights_bytes): random, so no link or disk can compress them


def safetensors_bytes(tensors: dict[str, int], rng: random.Random | None = None) -> bytes:
    """A safetensors file (github.com/huggingface/safetensors, the format's README): an 8-byte little-endian header
    length, the JSON header (dtype, shape, data_offsets per tensor), then the tensors' bytes (bf16: zeros, or
    random bytes from rng)."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, elements in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [elements], "data_offsets": [offset, offset + 2 * elements]}
        offset += 2 * elements
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)                      # the header padded to 8 bytes, as safetensors writes it
    return len(raw).to_bytes(8, "little") + raw + (rng.randbytes(offset) if rng else bytes(offset))


def weight_files(model: str, layers: int, weights_bytes: int = 0) -> dict[str, bytes]:
    """model.safetensors.index.json and its shards: the layers' tensors spread over SHARDS files, in order. With
    weights_bytes, the embedding and lm_head hold about that many random bytes in all (a model of a size worth
    staging, for benchmarks); otherwise every tensor is 16 zeros."""
    names = [f"model.layers.{k}.self_attn.q_proj.weight" for k in range(max(1, min(layers, 8)))]
    names = ["model.embed_tokens.weight", *names, "lm_head.weight"]
    large = weights_bytes // 4          # elements (2 bytes each) of each of the two large tensors
    rng = random.Random(FILL_SEED) if weights_bytes else None
    files, weight_map, total = {}, {}, 0
    for index in range(SHARDS):
        mine = names[index::SHARDS]
        shard = f"model-{index + 1:05d}-of-{SHARDS:05d}.safetensors"
        sizes = {name: large if large and name in (names[0], names[-1]) else 16 for name in mine}
        files[f"{model}/{shard}"] = safetensors_bytes(sizes, rng)
        weight_map.update({name: shard for name in mine})
        total += 2 * sum(sizes.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    files[f"{model}/model.safetensors.index.json"] = (json.dumps(index, indent=2) + "\n").encode()
    return files
