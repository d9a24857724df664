"""Where `dapo-ops stage` reads the job's files (dapo_ops/stage/source.py) and what it checks there before it copies
a byte (dapo_ops/stage/checks.py), on real files: a model directory with valid safetensors shards, parquet written
by pyarrow, a tokenizer trained by the `tokenizers` library with the simulator's ChatML template."""

import hashlib
import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dapo_ops.errors import UsageError
from dapo_ops.job.spec import load_spec
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.stage import checks
from dapo_ops.stage.source import (Source, data_targets, hash_local, local_model_names, model_targets, parse_source,
                                   source_files)
from dapo_sim.checkpoint import safetensors_bytes
from dapo_sim.stage import CHAT_TEMPLATE, SPECIAL_TOKENS, tokenizer_config, train_tokenizer

HOSTS = ["node1", "node2"]
SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def make_model(model):
    model.mkdir(parents=True)
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json"):
        (model / name).write_text("{}")
    (model / SHARDS[0]).write_bytes(safetensors_bytes({"model.embed_tokens.weight": 16, "lm_head.weight": 8}))
    (model / SHARDS[1]).write_bytes(safetensors_bytes({"model.layers.0.self_attn.q_proj.weight": 16}))
    index = {"metadata": {"total_size": 80}, "weight_map": {"model.embed_tokens.weight": SHARDS[0],
                                                            "lm_head.weight": SHARDS[0],
                                                            "model.layers.0.self_attn.q_proj.weight": SHARDS[1]}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    (model / "pytorch_model.bin").write_bytes(b"\0" * 32)
    (model / "original").mkdir()
    (model / "original" / "consolidated.00.pth").write_bytes(b"\0" * 32)
    return model


def row(content: str, answer: str = "4") -> dict:
    return {"data_source": "math_dapo", "prompt": [{"content": content, "role": "user"}], "ability": "MATH",
            "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"}, "extra_info": {"index": "0"}}


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


# ------------------------------------------------------------------------------------------------ source.py

def test_parse_source_takes_node_colon_absolute_path_as_that_node_s_directory():
    assert parse_source("node2:/data/models/qwen3/", "--model-from", HOSTS) == Source("node2", "/data/models/qwen3")
    assert str(Source("node2", "/data/m")) == "node2:/data/m" and str(Source(None, "/data/m")) == "/data/m"


def test_parse_source_refuses_a_relative_path_on_a_node():
    with pytest.raises(UsageError, match="must be absolute") as caught:
        parse_source("node1:data/models/qwen3", "--model-from", HOSTS)
    assert caught.value.exit_code == 2 and "--model-from" in str(caught.value)


def test_parse_source_refuses_an_unknown_host_naming_the_known_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"gpu9 is not a host of the inventory \(known: node1, node2\)"):
        parse_source("gpu9:/data/models", "--data-from", HOSTS)
    (tmp_path / "gpu9:" / "data" / "models").mkdir(parents=True)   # a local directory of that name is taken as one
    assert parse_source("gpu9:/data/models", "--data-from", HOSTS) == Source(None, str(tmp_path / "gpu9:/data/models"))


def test_parse_source_makes_a_plain_path_an_absolute_controller_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_source("models/qwen3", "--model-from", HOSTS) == Source(None, str(tmp_path / "models" / "qwen3"))
    assert parse_source("/srv/models/qwen3/", "--model-from", HOSTS) == Source(None, "/srv/models/qwen3")


PATHS = [("data.train_files", "/data/dapo/dapo-math-17k.parquet"), ("data.val_files", "/data/aime/aime-2024.parquet"),
         ("data.val_files", "/data/dapo/dapo-math-17k.parquet")]


def test_data_targets_read_the_job_s_own_paths_by_default_and_keep_a_repeated_path_once():
    assert data_targets(PATHS, None) == [
        ("/data/dapo/dapo-math-17k.parquet", "/data/dapo/dapo-math-17k.parquet", "data.train_files"),
        ("/data/aime/aime-2024.parquet", "/data/aime/aime-2024.parquet", "data.val_files")]


def test_data_targets_with_data_from_read_each_file_by_its_name_in_that_directory():
    expected = [("/stash/dapo-math-17k.parquet", "/data/dapo/dapo-math-17k.parquet", "data.train_files"),
                ("/stash/aime-2024.parquet", "/data/aime/aime-2024.parquet", "data.val_files")]
    assert data_targets(PATHS, Source(None, "/stash")) == expected
    assert data_targets(PATHS, Source("node1", "/stash")) == expected


def test_model_targets_put_each_name_under_the_job_s_model_path():
    assert model_targets("/srv/qwen3", "/data/model/", ["config.json"]) == [("/srv/qwen3/config.json",
                                                                              "/data/model/config.json")]


def test_source_files_carry_each_source_s_size_and_sha256(tmp_path):
    train = tmp_path / "train.parquet"
    train.write_bytes(b"PAR1 rows PAR1")
    pairs = [(str(train), "/data/dapo/train.parquet", "data.train_files")]
    (found,) = source_files(pairs, hash_local([str(train)]))
    assert (found.source, found.target, found.what, found.size) == (*pairs[0], 14)
    assert found.sha256 == hashlib.sha256(b"PAR1 rows PAR1").hexdigest()


def test_source_files_refuse_missing_or_unreadable_sources_and_copy_nothing(tmp_path):
    (tmp_path / "train.parquet").write_bytes(b"x")
    named = (("train.parquet", "data.train_files"), ("val.parquet", "data.val_files"),
             ("aime.parquet", "data.val_files"))
    pairs = [(str(tmp_path / n), f"/data/{n}", what) for n, what in named]
    with pytest.raises(UsageError) as caught:
        source_files(pairs, hash_local([s for s, _, _ in pairs]))
    message = str(caught.value)
    assert message.startswith(f"not at the source: {tmp_path}/val.parquet (data.val_files), {tmp_path}/aime.parquet")
    assert message.endswith("nothing was copied") and "train.parquet" not in message
    digests = {str(tmp_path / "train.parquet"): {"path": "x", "error": "Permission denied"}}
    with pytest.raises(UsageError, match="train.parquet: Permission denied; nothing was copied"):
        source_files(pairs[:1], digests)


def test_local_model_names_list_the_index_its_shards_config_and_tokenizer_only(tmp_path):
    model = make_model(tmp_path / "qwen3")
    (model / "consolidated.pth").write_bytes(b"weights the index does not name")
    assert local_model_names(str(model)) == (["config.json", *SHARDS, "model.safetensors.index.json",
                                              "tokenizer.json", "tokenizer_config.json"],
                                             ["consolidated.pth", "original", "pytorch_model.bin"])


def test_a_truncated_shard_refuses_the_source_and_copies_nothing(tmp_path):
    model = make_model(tmp_path / "qwen3")
    shard = model / SHARDS[1]
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(UsageError) as caught:
        local_model_names(str(model))
    assert SHARDS[1] in str(caught.value) and "truncated" in str(caught.value)
    assert str(caught.value).endswith("nothing was copied")


def test_a_missing_model_directory_or_a_shard_the_index_names_refuses_the_source(tmp_path):
    with pytest.raises(UsageError, match="no model directory there"):
        local_model_names(str(tmp_path / "absent"))
    model = make_model(tmp_path / "qwen3")
    (model / SHARDS[0]).unlink()
    with pytest.raises(UsageError, match=f"{SHARDS[0]} is missing.*nothing was copied"):
        local_model_names(str(model))


# ------------------------------------------------------------------------------------------------ data columns

def test_a_parquet_file_with_verl_s_columns_has_no_problems(tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [row("What is 2 + 2?")])
    assert checks.column_problems(path, "data.train_files") == []
    checks.check_data({path: "data.train_files"})


def test_a_file_without_reward_model_is_named_with_the_columns_it_has(tmp_path):
    rows = [{k: v for k, v in row("What is 2 + 2?").items() if k != "reward_model"}]
    path = write_parquet(tmp_path / "train.parquet", rows)
    (problem,) = checks.column_problems(path, "data.train_files")
    assert "lacks the column(s) reward_model" in problem
    assert problem.endswith("(it has data_source, prompt, ability, extra_info)")


def test_a_file_that_is_not_parquet_is_a_problem_not_an_exception(tmp_path):
    text = tmp_path / "train.parquet"
    text.write_text("data_source,prompt\nmath,What is 2 + 2?\n")
    (problem,) = checks.column_problems(str(text), "data.train_files")
    assert problem.startswith(f"data.train_files ({text})")
    assert len(checks.column_problems(str(tmp_path / "absent.parquet"), "data.val_files")) == 1


def test_check_data_refuses_the_files_without_verl_s_columns_only(tmp_path):
    good = write_parquet(tmp_path / "train.parquet", [row("What is 2 + 2?")])
    bad = write_parquet(tmp_path / "val.parquet", [{"data_source": "aime", "question": "?"}])
    with pytest.raises(UsageError) as caught:
        checks.check_data({good: "data.train_files", bad: "data.val_files"})
    assert caught.value.exit_code == 2 and str(caught.value).endswith("nothing was copied")
    assert bad in str(caught.value) and good not in str(caught.value)


def test_a_json_lines_data_file_is_read_by_its_keys(tmp_path):
    assert checks.column_problems(write_jsonl(tmp_path / "train.jsonl", [row("What is 2 + 2?")]), "d") == []
    (problem,) = checks.column_problems(write_jsonl(tmp_path / "val.jsonl", [{"prompt": "?"}]), "data.val_files")
    assert "data_source, reward_model" in problem and problem.endswith("(it has prompt)")


def test_a_json_lines_file_of_arrays_is_a_problem_not_an_exception(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("[1, 2]\n")
    try:
        problems = checks.column_problems(str(path), "data.train_files")
    except TypeError as exc:
        problems = exc
    assert isinstance(problems, list) and len(problems) == 1, (
        f"a .jsonl of JSON arrays raises {problems!r} instead of giving a problem")


# ------------------------------------------------------------------------------------------------ overlong prompts

SHORT = ["What is 2 + 2?", "Find the remainder when $7^{20}$ is divided by $13$."]
LONG = ["Readings: " + ", ".join(str(i * 7919 % 100003) for i in range(300)) + ". What is their total?",
        "Readings: " + ", ".join(str(i * 104729 % 99991) for i in range(150)) + ". What is their total?"]
ROWS = [SHORT[0], LONG[0], SHORT[0], LONG[0], SHORT[1], LONG[1], LONG[0]]     # LONG[0] three times


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    """A model directory with a trained tokenizer and the simulator's tokenizer_config.json, and the tokenizer."""
    model = tmp_path_factory.mktemp("model")
    tokenizer = train_tokenizer(SHORT + LONG, vocab_size=400)
    tokenizer.save(str(model / "tokenizer.json"))
    spec = load_spec(PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml")
    config = tokenizer_config(spec, {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS})
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    return model, tokenizer


def count(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def chatml(content: str) -> str:
    return f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


def test_count_overlong_counts_every_row_of_a_long_prompt_as_the_tokenizer_counts_the_rendered_chat(tokenized,
                                                                                                    tmp_path):
    model, tokenizer = tokenized
    n = {text: count(tokenizer, chatml(text)) for text in SHORT + LONG}
    limit = max(n[t] for t in SHORT)
    assert n[LONG[0]] > n[LONG[1]] > limit           # the fixture's premise
    train = write_parquet(tmp_path / "train.parquet", [row(t) for t in ROWS])
    found = checks.count_overlong(str(model), [train], limit)
    assert found == checks.Overlong(prompts=7, over=4, limit=limit, longest=n[LONG[0]])
    # a prompt exactly at the limit is kept (verl drops only the longer ones)
    assert checks.count_overlong(str(model), [train], n[LONG[1]]).over == 3
    # the rows of several training files add up, and a JSON-lines file counts as its parquet twin does
    twin = write_jsonl(tmp_path / "train.jsonl", [row(t) for t in ROWS])
    both = checks.count_overlong(str(model), [train, twin], limit)
    assert (both.prompts, both.over, both.longest) == (14, 8, n[LONG[0]])


def test_chat_template_jinja_wins_over_the_template_in_tokenizer_config(tokenized, tmp_path):
    model, tokenizer = tokenized
    local = shutil.copytree(model, tmp_path / "model")
    (local / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }} | {{ m['content'] }}"
                                               "{% endfor %}")
    train = write_parquet(tmp_path / "train.parquet", [row(t) for t in ROWS])
    doubled = count(tokenizer, f"{LONG[0]} | {LONG[0]}")
    assert doubled != count(tokenizer, chatml(LONG[0]))
    assert checks.count_overlong(str(local), [train], 10).longest == doubled


def test_a_named_default_template_in_tokenizer_config_is_the_one_used(tokenized, tmp_path):
    model, tokenizer = tokenized
    local = shutil.copytree(model, tmp_path / "model")
    config = json.loads((local / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "{{ raise_exception('not this one') }}"},
                               {"name": "default", "template": CHAT_TEMPLATE}]
    (local / "tokenizer_config.json").write_text(json.dumps(config))
    train = write_parquet(tmp_path / "train.parquet", [row(LONG[1])])
    assert checks.count_overlong(str(local), [train], 10).longest == count(tokenizer, chatml(LONG[1]))


def test_without_tokenizer_json_or_a_chat_template_the_prompts_are_not_counted(tokenized, tmp_path):
    model, _ = tokenized
    train = write_parquet(tmp_path / "train.parquet", [row(SHORT[0])])
    local = shutil.copytree(model, tmp_path / "model")
    config = json.loads((local / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (local / "tokenizer_config.json").write_text(json.dumps(config))
    assert checks.count_overlong(str(local), [train], 10) == "not counted: the tokenizer has no chat template"
    (local / "tokenizer.json").unlink()
    assert checks.count_overlong(str(local), [train], 10).startswith("not counted: the model has no tokenizer.json")


def test_a_malformed_tokenizer_config_beside_a_chat_template_jinja_is_not_counted_rather_than_raised(tokenized,
                                                                                                    tmp_path):
    model, _ = tokenized
    local = shutil.copytree(model, tmp_path / "model")
    (local / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (local / "tokenizer_config.json").write_text("{not json")
    train = write_parquet(tmp_path / "train.parquet", [row(SHORT[0])])
    try:
        found = checks.count_overlong(str(local), [train], 10)
    except ValueError as exc:
        found = exc
    assert isinstance(found, str) and found.startswith("not counted"), (
        f"with chat_template.jinja present, tokenizer_config.json is read outside the "
        f"guarded block and {found!r} escapes")
