"""The staged model's weights (pure): a sharded safetensors checkpoint in the layout a Hugging Face model directory
has, small, for `dapo-sim stage` (dapo_sim/stage.py)."""

from __future__ import annotations

import json


SHARDS = 2


def safetensors_bytes(tensors: dict[str, int]) -> bytes:
    """A safetensors file (github.com/huggingface/safetensors, the format's README): an 8-byte little-endian header
    length, the JSON header (dtype, shape, data_offsets per tensor), then the tensors' bytes (zeros, bf16)."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, elements in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [elements], "data_offsets": [offset, offset + 2 * elements]}
        offset += 2 * elements
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)                      # the header padded to 8 bytes, as safetensors writes it
    return len(raw).to_bytes(8, "little") + raw + bytes(offset)


def weight_files(model: str, layers: int) -> dict[str, bytes]:
    """model.safetensors.index.json and its shards: the layers' tensors spread over SHARDS files, in order."""
    names = [f"model.layers.{k}.self_attn.q_proj.weight" for k in range(max(1, min(layers, 8)))]
    names = ["model.embed_tokens.weight", *names, "lm_head.weight"]
    files, weight_map, total = {}, {}, 0
    for index in range(SHARDS):
        mine = names[index::SHARDS]
        shard = f"model-{index + 1:05d}-of-{SHARDS:05d}.safetensors"
        files[f"{model}/{shard}"] = safetensors_bytes({name: 16 for name in mine})
        weight_map.update({name: shard for name in mine})
        total += 32 * len(mine)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    files[f"{model}/model.safetensors.index.json"] = (json.dumps(index, indent=2) + "\n").encode()
    return files
