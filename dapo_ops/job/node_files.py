"""The files a job needs on every node: one definition for `dapo-ops stage`, which puts them there, and the launch
rehearsal, which checks them on every rank's node. Standard library only: the rehearsal pushes this file with its
driver (and ships it by value with the rank actors), and stage pushes it to a source node.

What the job reads from each node's disk, wherever Ray places its processes:
- the model's config.json and tokenizer: verl's TaskRunner and every FSDP and rollout worker build the tokenizer
  from model.path (verl v0.7.0 recipe/dapo/main_dapo.py `hf_tokenizer(local_path)`, verl/workers/fsdp_workers.py
  `hf_tokenizer`, the agent loop), which transformers' AutoTokenizer reads from tokenizer_config.json and
  tokenizer.json (or a BPE vocabulary, vocab.json with merges.txt);
- the weights: the actor's rank 0 builds the model from them (fsdp_workers.py `from_pretrained` on mesh coordinate
  0) and every vLLM rank loads its shard from the same directory, so each node of the run needs all of them:
  model.safetensors.index.json and every shard its weight_map names, or one model.safetensors. A shard is checked
  against its own header (safetensors: an 8-byte little-endian header length, a JSON header whose data_offsets
  give the data's end), so a truncated copy is found by its size without reading the tensors;
- the training and validation parquet files (verl/trainer/main_ppo.py, the TaskRunner's datasets).
"""

from __future__ import annotations

import json
import os
import struct

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
MAX_HEADER = 100 << 20      # safetensors refuses headers over 100 MB
# what every problem below says, for a caller to tell them from others (launch points at `dapo-ops stage`)
PROBLEM_PHRASES = ("must be on every node", "builds the tokenizer on every node", "holds no weights",
                   "a weight shard the index names", "not a safetensors file", "truncated or not",
                   "not a safetensors index", "not a file in the model directory", "cannot be read as a safetensors")
# weights in a model directory that the job does not read unless the index names them: another format's copy
# (PyTorch .bin, an original/ checkpoint) would only cost the copy
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx")


def required_files(spec) -> dict[str, str]:
    """The data files every rank's node must hold (path -> what it is): verl's TaskRunner builds the datasets on
    whichever node Ray places it (verl v0.7.0 verl/trainer/main_ppo.py). The model directory's files are
    model_file_names'."""
    files: dict[str, str] = {}
    for field, path in spec.data.paths():
        files.setdefault(path, f"the {'training' if field == 'data.train_files' else 'validation'} data ({field})")
    return files


def index_shards(index_path: str) -> list[str]:
    """The shard file names an index's weight_map names, sorted; ValueError naming the problem."""
    try:
        with open(index_path, "rb") as fh:
            weight_map = json.load(fh)["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{index_path} is not a safetensors index ({type(exc).__name__}: {exc})") from None
    bad = [s for s in shards if not isinstance(s, str) or os.path.basename(s) != s or s in ("", ".", "..")]
    if bad:
        raise ValueError(f"{index_path} names {bad[0]!r}, which is not a file in the model directory")
    return shards


def model_file_names(model_dir: str) -> tuple[list[str], list[str]]:
    """(the model directory's files to put on every node, the entries left out), names relative to the directory.
    Every top-level regular file but weights the index does not name; subdirectories are left out. OSError or
    ValueError (a bad index) when the directory cannot be read."""
    names = sorted(os.listdir(model_dir))
    files = [n for n in names if os.path.isfile(os.path.join(model_dir, n)) and not n.startswith(".")]
    named: set[str] = set()
    if INDEX in files:
        named = set(index_shards(os.path.join(model_dir, INDEX)))
    elif SINGLE in files:
        named = {SINGLE}
    kept = [n for n in files if n in named or not n.lower().endswith(WEIGHT_SUFFIXES)]
    kept += sorted(named - set(kept))      # a shard the index names but the directory lacks: model_problems says so
    return sorted(kept), [n for n in names if n not in kept]


def shard_problem(path: str) -> str | None:
    """None when the file is a whole safetensors file, else what is wrong with it."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{path} is {size} bytes: not a safetensors file"
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER or 8 + length > size:
                return f"{path} is {size} bytes and its header claims {length}: truncated or not a safetensors file"
            header = json.loads(fh.read(length))
        if not isinstance(header, dict):
            return f"{path}: its header is not a JSON object: not a safetensors file"
    except FileNotFoundError:
        return f"{path} is missing: a weight shard the index names"
    except (OSError, ValueError) as exc:
        return f"{path} cannot be read as a safetensors file: {exc}"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)
            and isinstance(t.get("data_offsets"), list) and len(t["data_offsets"]) == 2]
    expected = 8 + length + max(ends, default=0)
    if size != expected:
        return f"{path} is {size} bytes, its header says {expected}: truncated or not the file the index names"
    return None


def model_problems(model_dir: str) -> list[str]:
    """What the job would not find in the model directory on this node."""
    problems = []
    join = os.path.join
    if not os.path.isfile(join(model_dir, "config.json")):
        problems.append(f"{join(model_dir, 'config.json')} is missing: the model's config.json (model.path) must be on "
                        "every node")
    if not os.path.isfile(join(model_dir, "tokenizer_config.json")):
        problems.append(f"{join(model_dir, 'tokenizer_config.json')} is missing: verl builds the tokenizer on every "
                        "node")
    if not (os.path.isfile(join(model_dir, "tokenizer.json")) or
            (os.path.isfile(join(model_dir, "vocab.json")) and os.path.isfile(join(model_dir, "merges.txt")))):
        problems.append(f"{join(model_dir, 'tokenizer.json')} is missing (and no vocab.json with merges.txt): verl "
                        "builds the tokenizer on every node")
    index = join(model_dir, INDEX)
    if os.path.isfile(index):
        try:
            shards = index_shards(index)
        except OSError as exc:
            return problems + [f"{index} cannot be read ({exc.strerror})"]
        except ValueError as exc:
            msg = str(exc)
            return problems + [msg if msg.startswith(index) else f"{index} is not a safetensors index ({msg})"]
        for shard in shards:
            problem = shard_problem(join(model_dir, shard))
            if problem:
                problems.append(problem)
    elif os.path.isfile(join(model_dir, SINGLE)):
        problem = shard_problem(join(model_dir, SINGLE))
        if problem:
            problems.append(problem)
    else:
        problems.append(f"{model_dir} holds no weights ({INDEX} or {SINGLE}): vLLM's ranks and the actor's rank 0 "
                        "load them on this node")
    return problems


def file_problems(required: dict[str, str], model_dir: str | None) -> list[str]:
    """Every required file missing, then the model directory's problems."""
    problems = [f"{path} is missing: {what} must be on every node" for path, what in required.items()
                if not os.path.isfile(path)]
    return problems + (model_problems(model_dir) if model_dir else [])
