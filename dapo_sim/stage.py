"""`dapo-sim stage JOB`: a job's model and data files, small, on the simulated nodes.

On a real cluster the model and the parquet files are copied to every node (or a shared filesystem) before a
launch; the rehearsal checks that each rank's node has them. The simulated nodes start with an empty /data, so this
writes what the dry-mode DAPO entry point reads with the real libraries (transformers, datasets, pyarrow):

- the model's config.json (from the spec's architecture, in the field names of a Hugging Face Qwen3-MoE config.json);
- a real tokenizer beside it: a small byte-level BPE that the `tokenizers` library trains here on the staged short
  prompts (tokenizer.json), with Qwen3's special tokens and a ChatML chat template (tokenizer_config.json,
  special_tokens_map.json), which `transformers.AutoTokenizer.from_pretrained(model.path)` loads;
- weights in the layout a Hugging Face checkpoint has: model.safetensors.index.json and the SHARDS shards its
  weight_map names, each a valid safetensors file (header length, JSON header, data) holding a few small tensors
  (the rehearsal checks every shard against its header on every node; nothing here loads them into a model);
- the data as verl's DAPO data is (DAPO-Math-17k and the AIME validation set): parquet with the columns
  `data_source`, `prompt` (a chat: a list of {"content", "role"}), `ability`, `reward_model` ({ground_truth, style})
  and `extra_info` ({index}); TRAIN_ROWS training rows of which OVERLONG_ROWS are longer than the job's
  `data.max_prompt_length` tokens once the chat template is applied (so verl's overlong filter has rows to drop),
  and VAL_ROWS validation rows. The content is generated from a fixed seed: the same spec gives the same bytes.

pyarrow and tokenizers are dapo-ops' own dependencies (stage's checks read parquet and count tokens with them).
"""

from __future__ import annotations

import io
import json
import random
import uuid
from dataclasses import dataclass

from dapo_ops.errors import UsageError
from dapo_sim.checkpoint import weight_files
from dapo_ops.job.spec import JobSpec

TRAIN_ROWS = 320          # rows over all training files
OVERLONG_ROWS = 8         # of them, longer than data.max_prompt_length tokens with the chat template applied
VAL_ROWS = 30
SEED = 17                 # the generator's fixed seed: the staged content is the same on every run
VOCAB_SIZE = 1024         # the staged tokenizer's vocabulary (bytes, merges, special tokens)

TRAIN_SOURCE = "math_dapo"   # verl/utils/reward_score/__init__.py default_compute_score: math_dapo, math and
VAL_SOURCE = "aime"          # aime* all go to math_dapo.compute_score
ABILITY = "MATH"
STYLE = "rule-lighteval/MATH_v2"

# Qwen3's special tokens (the base model's end of text, ChatML's turn markers); <|im_end|> ends a chat turn, so it
# is the eos token of an instruction-tuned Qwen3 tokenizer, <|endoftext|> its pad token.
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
# ChatML as Qwen3 renders a plain chat (no tools, no thinking): each turn `<|im_start|>role\ncontent<|im_end|>\n`,
# and add_generation_prompt opens the assistant's turn.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# How a DAPO-Math-17k prompt wraps its problem (the answer is an integer on a last line "Answer: ...").
INSTRUCTION = ("Solve the following math problem step by step. The last line of your response should be of the form "
               "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n")
REMINDER = "\n\nRemember to put your answer on its own line after \"Answer:\"."


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


# ------------------------------------------------------------------------------------------------ the problems

@dataclass(frozen=True)
class Problem:
    text: str
    answer: int


def _divisor_sum(n: int) -> int:
    return sum(d for d in range(1, n + 1) if n % d == 0)


def _totient(n: int) -> int:
    from math import gcd

    return sum(1 for k in range(1, n + 1) if gcd(k, n) == 1)


def _problem(rng: random.Random) -> Problem:
    """One short competition-style problem with an integer answer."""
    from math import comb, lcm

    kind = rng.randrange(6)
    if kind == 0:
        a, b, m = rng.randint(2, 99), rng.randint(10, 999), rng.randint(7, 997)
        return Problem(f"Find the remainder when ${a}^{{{b}}}$ is divided by ${m}$.", pow(a, b, m))
    if kind == 1:
        n = rng.randint(12, 2000)
        return Problem(f"What is the sum of all positive divisors of ${n}$?", _divisor_sum(n))
    if kind == 2:
        n = rng.randint(12, 3000)
        return Problem(f"How many positive integers not exceeding ${n}$ are relatively prime to ${n}$?", _totient(n))
    if kind == 3:
        n = rng.randint(6, 30)
        k = rng.randint(2, n - 2)
        return Problem(f"In how many ways can a committee of ${k}$ people be chosen from a club of ${n}$ members?",
                       comb(n, k))
    if kind == 4:
        a, d, n = rng.randint(-50, 50), rng.randint(1, 19), rng.randint(5, 80)
        return Problem(f"An arithmetic sequence has first term ${a}$ and common difference ${d}$. What is the sum of "
                       f"its first ${n}$ terms?", n * (2 * a + (n - 1) * d) // 2)
    a, b = rng.randint(6, 400), rng.randint(6, 400)
    return Problem(f"Find the least common multiple of ${a}$ and ${b}$.", lcm(a, b))


def _content(problem: str) -> str:
    return INSTRUCTION + problem + REMINDER


def _rendered(content: str) -> str:
    """What CHAT_TEMPLATE makes of a one-turn chat with add_generation_prompt (tested against transformers)."""
    return f"{IM_START}user\n{content}{IM_END}\n{IM_START}assistant\n"


def _long_problem(rng: random.Random, tokens: int, count) -> Problem:
    """A problem (a long table of values to add up) whose prompt, rendered with the chat template, is longer than
    `tokens` tokens as `count` (the staged tokenizer's count) measures it."""
    values: list[int] = []

    def text() -> str:
        rows = "\n".join(f"Station {i + 1} recorded ${v}$ units." for i, v in enumerate(values))
        return f"A survey lists the readings of {len(values)} weather stations:\n{rows}\nWhat is the total of all " \
               "the readings?"

    while True:
        values.extend(rng.randint(100, 99999) for _ in range(32))
        if count(_rendered(_content(text()))) > tokens:
            return Problem(text(), sum(values))


def _row(source: str, index: str, problem: Problem) -> dict:
    return {"data_source": source,
            "prompt": [{"content": _content(problem.text), "role": "user"}],
            "ability": ABILITY,
            "reward_model": {"ground_truth": str(problem.answer), "style": STYLE},
            "extra_info": {"index": index}}


def _index(split: str, n: int) -> str:
    """A row's extra_info.index, a UUID as in DAPO-Math-17k (name-based, so the same on every run)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://dapo-ops.invalid/sim/{split}/{n}"))


# ------------------------------------------------------------------------------------------------ the tokenizer

def _tokenizers():
    try:
        import tokenizers
    except ImportError as exc:
        raise UsageError(f"dapo-sim stage builds the model's tokenizer with the `tokenizers` library ({exc}): "
                         "pip install -e '.[test]'") from None
    return tokenizers


def train_tokenizer(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE (Qwen's kind: NFC, byte-level pre-tokenizer and decoder) trained on `texts`, with Qwen3's
    special tokens at ids 0-2."""
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.normalizer = tk.normalizers.NFC()
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = tk.decoders.ByteLevel()
    tokenizer.post_processor = tk.processors.ByteLevel(trim_offsets=False)
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def tokenizer_config(spec: JobSpec, ids: dict[str, int]) -> dict:
    """tokenizer_config.json as transformers 4.57 reads it: Qwen3's class (Qwen2Tokenizer, loaded as
    Qwen2TokenizerFast from tokenizer.json), eos/pad tokens and the chat template."""
    added = {str(ids[t]): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                           "special": True} for t in SPECIAL_TOKENS}
    return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
            "additional_special_tokens": [IM_START, IM_END], "bos_token": None, "chat_template": CHAT_TEMPLATE,
            "clean_up_tokenization_spaces": False, "eos_token": IM_END, "errors": "replace",
            "model_max_length": spec.model.architecture.max_position_embeddings, "pad_token": ENDOFTEXT,
            "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}


SPECIAL_TOKENS_MAP = {"additional_special_tokens": [IM_START, IM_END], "eos_token": IM_END, "pad_token": ENDOFTEXT}


# ------------------------------------------------------------------------------------------------ the files

@dataclass(frozen=True)
class StagedData:
    train: list[dict]
    val: list[dict]
    overlong: list[int]         # indexes of the training rows longer than max_prompt_length tokens
    tokenizer: object           # tokenizers.Tokenizer


def _prompt_text(row: dict) -> str:
    return row["prompt"][0]["content"]


def staged_data(spec: JobSpec) -> StagedData:
    """The rows and the tokenizer, from the fixed seed and the spec's max_prompt_length."""
    rng = random.Random(SEED)
    train = [_row(TRAIN_SOURCE, _index("train", n), _problem(rng)) for n in range(TRAIN_ROWS - OVERLONG_ROWS)]
    val = [_row(VAL_SOURCE, _index("val", n), _problem(rng)) for n in range(VAL_ROWS)]
    tokenizer = train_tokenizer([_prompt_text(r) for r in train + val])

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    limit = spec.data.max_prompt_length
    long_rows = [_row(TRAIN_SOURCE, _index("train-long", n), _long_problem(rng, limit, count))
                 for n in range(OVERLONG_ROWS)]
    # spread through the file: one in every TRAIN_ROWS // OVERLONG_ROWS rows
    step = TRAIN_ROWS // OVERLONG_ROWS
    positions = [step // 2 + k * step for k in range(OVERLONG_ROWS)]
    for position, row in zip(positions, long_rows):
        train.insert(position, row)
    overlong = [i for i, r in enumerate(train) if count(_rendered(_prompt_text(r))) > limit]
    return StagedData(train, val, overlong, tokenizer)


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise UsageError(f"dapo-sim stage writes the job's parquet files with pyarrow ({exc}): "
                         "pip install -e '.[test]'") from None
    return pyarrow


def parquet_bytes(rows: list[dict]) -> bytes:
    """The rows as one parquet file, in DAPO-Math-17k's schema."""
    pa = _pyarrow()
    schema = pa.schema([
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        ("extra_info", pa.struct([("index", pa.string())])),
    ])
    buffer = io.BytesIO()
    pa.parquet.write_table(pa.Table.from_pylist(rows, schema=schema), buffer)
    return buffer.getvalue()


def data_bytes(path: str, rows: list[dict]) -> bytes:
    """A data file in the format its name gives verl's RLHFDataset: JSON lines for .json, parquet otherwise."""
    if path.endswith(".json"):
        return "".join(json.dumps(r) + "\n" for r in rows).encode()
    return parquet_bytes(rows)


def _split(rows: list[dict], parts: int) -> list[list[dict]]:
    size = -(-len(rows) // parts)
    return [rows[k * size:(k + 1) * size] for k in range(parts)]


def job_files(spec: JobSpec, weights_bytes: int = 0) -> dict[str, bytes]:
    """Absolute node path -> content: the model's config.json and tokenizer, the data files (the training rows
    split over the training files in order, the validation rows over the validation files). The spec's model
    architecture is resolved as validate resolves it (dapo_ops/job/model_facts.py: the known model's config.json
    under the spec's own values), so the staged config.json is what the checks assumed."""
    from dapo_ops.job.model_facts import model_facts, with_facts

    spec = with_facts(spec, model_facts(spec, None))
    data = staged_data(spec)
    model = spec.model.path.rstrip("/")
    tokenizer = data.tokenizer
    ids = {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}
    files = {f"{model}/config.json": _json(model_config(spec)),
             f"{model}/tokenizer.json": tokenizer.to_str().encode(),
             f"{model}/tokenizer_config.json": _json(tokenizer_config(spec, ids)),
             f"{model}/special_tokens_map.json": _json(SPECIAL_TOKENS_MAP),
             **weight_files(model, spec.model.architecture.layers, weights_bytes)}
    paths = spec.data.paths()
    for field, rows in (("data.train_files", data.train), ("data.val_files", data.val)):
        mine = [p for f, p in paths if f == field]
        for path, part in zip(mine, _split(rows, len(mine))):
            files.setdefault(path, data_bytes(path, part))
    return files


def _json(value: dict) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()
