"""What `dapo-ops stage` checks at the source before it copies a byte (controller side, on local files):

- each data file has the columns verl's DAPO run reads: `prompt` (data.prompt_key, RLHFDataset in verl v0.7.0
  verl/utils/dataset/rl_dataset.py), `data_source` (data.reward_fn_key) and `reward_model` with its ground truth
  (v0.7.0 verl/workers/reward_manager/dapo.py reads `reward_model["ground_truth"]`);
- how many training prompts are longer than data.max_prompt_length tokens once the model's chat template is applied
  with add_generation_prompt: verl's filter_overlong_prompts drops them (rl_dataset.py maybe_filter_out_long_prompts
  counts `len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True))`). The template is rendered as
  transformers renders it (a sandboxed Jinja2 environment with trim_blocks and lstrip_blocks, transformers
  utils/chat_template_utils.py) and the text is counted with the model's tokenizer.json by the `tokenizers` library
  without special tokens added, as apply_chat_template's tokenize step does. Each distinct prompt is tokenized once
  and counted as often as it occurs (DAPO-Math-17k repeats each of its 17k prompts about a hundred times).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass

from dapo_ops.errors import UsageError

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")   # what the count reads


@dataclass(frozen=True)
class Overlong:
    prompts: int             # training prompts counted
    over: int                # of them, longer than the limit
    limit: int
    longest: int


def columns(path: str) -> list[str]:
    """The data file's column names: parquet's schema, or the keys of a JSON-lines file's first rows."""
    if path.endswith((".json", ".jsonl")):
        names: dict[str, None] = {}
        with open(path, encoding="utf-8") as fh:
            for number, line in zip(range(1, 101), fh):
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise ValueError(f"line {number} is not a JSON object")
                    names.update(dict.fromkeys(row))
        return list(names)
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)


def column_problems(path: str, name: str) -> list[str]:
    try:
        found = columns(path)
    except (OSError, ValueError) as exc:
        return [f"{name} ({path}) cannot be read as a data file: {exc}"]
    except Exception as exc:  # pyarrow's ArrowInvalid and kin: the file is not parquet
        return [f"{name} ({path}) is not a parquet file: {type(exc).__name__}: {exc}"]
    missing = [c for c in REQUIRED_COLUMNS if c not in found]
    if missing:
        return [f"{name} ({path}) lacks the column(s) {', '.join(missing)} that verl's DAPO run reads "
                f"(it has {', '.join(found) or 'none'})"]
    return []


def _prompts(path: str) -> Counter:
    """Each distinct prompt (as JSON) and how often it occurs."""
    if path.endswith((".json", ".jsonl")):
        with open(path, encoding="utf-8") as fh:
            values = [json.loads(line).get("prompt") for line in fh if line.strip()]
    else:
        import pyarrow.parquet as pq

        values = pq.read_table(path, columns=["prompt"]).column("prompt").to_pylist()
    return Counter(json.dumps(v, sort_keys=True) for v in values)


def chat_template(model_dir: str) -> str | None:
    """The chat template transformers would use: chat_template.jinja beside the tokenizer, else
    tokenizer_config.json's chat_template (a string, or the one named "default" of a list)."""
    jinja = os.path.join(model_dir, "chat_template.jinja")
    if os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as fh:
            return fh.read()
    with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as fh:
        template = json.load(fh).get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


def _renderer(template: str, special: dict):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)
    return lambda messages: compiled.render(messages=messages, add_generation_prompt=True, **special)


def count_overlong(model_dir: str, train_files: list[str], limit: int) -> Overlong | str:
    """The overlong training prompts, or why they cannot be counted here (no tokenizer.json, no chat template)."""
    tokenizer_file = os.path.join(model_dir, "tokenizer.json")
    if not os.path.isfile(tokenizer_file):
        return "not counted: the model has no tokenizer.json (the tokenizers library reads only that format)"
    try:
        template = chat_template(model_dir)
    except (OSError, ValueError) as exc:
        return f"not counted: tokenizer_config.json cannot be read ({exc})"
    if template is None:
        return "not counted: the tokenizer has no chat template"
    from tokenizers import Tokenizer

    try:
        with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as fh:
            config = json.load(fh)
        special = {k: config.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                   if isinstance(config, dict) and isinstance(config.get(k), str)}
        tokenizer = Tokenizer.from_file(tokenizer_file)
        render = _renderer(template, special)
        prompts: Counter = Counter()
        for path in train_files:
            prompts.update(_prompts(path))
        distinct = list(prompts)
        texts = [render(json.loads(p)) for p in distinct]
    except Exception as exc:  # a template error, a malformed tokenizer.json or prompt: the count is left out
        return f"not counted: {type(exc).__name__}: {exc}"
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    over = sum(prompts[p] for p, n in zip(distinct, lengths) if n > limit)
    return Overlong(sum(prompts.values()), over, limit, max(lengths, default=0))


def check_data(files: dict[str, str]) -> None:
    """UsageError for every data file (path -> its field) without verl's columns."""
    problems = [p for path, name in files.items() for p in column_problems(path, name)]
    if problems:
        raise UsageError("; ".join(problems) + ": nothing was copied")
