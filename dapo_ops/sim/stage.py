"""`dapo-ops sim stage JOB`: a job's model and data files, small, on the simulated nodes.

On a real cluster the model and the parquet files are copied to every node (or a shared filesystem) before a
launch; the rehearsal checks that each rank's node has them. The simulated nodes start with an empty /data, so this
writes what the dry-mode DAPO entry point reads: the model's config.json (from the spec's architecture, in the
field names of a Hugging Face Qwen3-MoE config.json) and placeholder parquet files (the dry mode only opens them).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

from dapo_ops.errors import UsageError
from dapo_ops.job.spec import JobSpec

# A parquet file starts and ends with the magic "PAR1"; this one carries no row groups (the dry mode reads none).
PARQUET_PLACEHOLDER = b"PAR1" + b"\0" * 8 + b"PAR1"


def model_config(spec: JobSpec) -> dict:
    m = spec.model.architecture
    config = {"architectures": ["Qwen3MoeForCausalLM"] if m.experts else ["Qwen3ForCausalLM"],
              "model_type": "qwen3_moe" if m.experts else "qwen3", "num_hidden_layers": m.layers,
              "hidden_size": m.hidden_size, "num_attention_heads": m.attention_heads,
              "num_key_value_heads": m.kv_heads, "head_dim": m.head_dim, "vocab_size": m.vocab_size,
              "max_position_embeddings": m.max_position_embeddings, "torch_dtype": "bfloat16"}
    if m.experts:
        config.update(num_experts=m.experts, num_experts_per_tok=m.experts_per_token,
                      moe_intermediate_size=m.moe_intermediate_size)
    return config


def job_files(spec: JobSpec) -> dict[str, bytes]:
    """Absolute node path -> content."""
    files = {f"{spec.model.path.rstrip('/')}/config.json": (json.dumps(model_config(spec), indent=2) + "\n").encode()}
    for _, path in spec.data.paths():
        files[path] = PARQUET_PLACEHOLDER
    return files


def node_path(node_root: Path, path: str) -> Path:
    """Where a node path under /data lies in the node's private /data directory (node_root/data)."""
    parts = PurePosixPath(path).parts
    if len(parts) < 3 or parts[:2] != ("/", "data") or ".." in parts:
        raise UsageError(f"{path}: the simulated nodes hold job files under /data only")
    return node_root.joinpath("data", *parts[2:])
