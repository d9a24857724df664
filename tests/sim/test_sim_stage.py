"""`dapo-sim stage`: which files a job needs on a node (the model's config.json and tokenizer, the data as verl's
DAPO data is), and where they land in a node's private /data."""

import dataclasses
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tokenizers

from dapo_ops.job.spec import load_spec
from dapo_ops.paths import PROJECT_ROOT
from dapo_sim.hwmodel import product_name
from dapo_sim.stage import (CHAT_TEMPLATE, OVERLONG_ROWS, TRAIN_ROWS, VAL_ROWS, job_files,
                                staged_data)

SPEC = load_spec(PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml")
MODEL = "/data/models/Qwen3-30B-A3B"
COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]


@pytest.fixture(scope="module")
def files():
    return job_files(SPEC)


def table(data: bytes):
    return pq.read_table(io.BytesIO(data))


def rendered(messages, add_generation_prompt=True):
    """The chat template rendered as transformers 4.57 does (utils/chat_template_utils.py _compile_jinja_template:
    a sandboxed Jinja environment with trim_blocks and lstrip_blocks)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=add_generation_prompt)


def test_the_job_gets_a_model_config_a_tokenizer_and_its_data_files(files):
    config = json.loads(files[f"{MODEL}/config.json"])
    assert config["num_hidden_layers"] == 48 and config["num_experts"] == 128 and config["model_type"] == "qwen3_moe"
    shards = [f"model-0000{k}-of-00002.safetensors" for k in (1, 2)]
    assert set(files) == {f"{MODEL}/{name}" for name in ("config.json", "tokenizer.json", "tokenizer_config.json",
                                                          "special_tokens_map.json", "model.safetensors.index.json",
                                                          *shards)} | {SPEC.data.train_files, SPEC.data.val_files}
    for path in (SPEC.data.train_files, SPEC.data.val_files):
        assert files[path][:4] == files[path][-4:] == b"PAR1"


def test_the_weights_are_a_sharded_safetensors_checkpoint_the_rehearsal_accepts(files, tmp_path):
    from dapo_ops.job.node_files import model_problems

    index = json.loads(files[f"{MODEL}/model.safetensors.index.json"])
    assert sorted(set(index["weight_map"].values())) == [f"model-0000{k}-of-00002.safetensors" for k in (1, 2)]
    for path, data in files.items():
        if path.startswith(MODEL):
            (tmp_path / path.rsplit("/", 1)[1]).write_bytes(data)
    assert model_problems(str(tmp_path)) == []
    header_length = int.from_bytes(files[f"{MODEL}/model-00001-of-00002.safetensors"][:8], "little")
    assert header_length % 8 == 0                                  # padded as the safetensors writer pads it


def test_the_data_has_dapo_math_s_columns(files):
    train, val = table(files[SPEC.data.train_files]), table(files[SPEC.data.val_files])
    assert train.column_names == val.column_names == COLUMNS
    assert (train.num_rows, val.num_rows) == (TRAIN_ROWS, VAL_ROWS) == (320, 30)
    schema = train.schema
    assert schema.field("prompt").type == pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
    assert schema.field("reward_model").type == pa.struct([("ground_truth", pa.string()), ("style", pa.string())])
    assert schema.field("extra_info").type == pa.struct([("index", pa.string())])
    rows = train.to_pylist()
    assert {r["data_source"] for r in rows} == {"math_dapo"}
    assert {r["data_source"] for r in val.to_pylist()} == {"aime"}   # verl routes aime* to math_dapo too
    assert {r["ability"] for r in rows} == {"MATH"}
    assert {r["reward_model"]["style"] for r in rows} == {"rule-lighteval/MATH_v2"}
    assert all(r["reward_model"]["ground_truth"].lstrip("-").isdigit() for r in rows)
    assert all(len(r["prompt"]) == 1 and r["prompt"][0]["role"] == "user" for r in rows)
    assert all(r["prompt"][0]["content"].startswith("Solve the following math problem") for r in rows)
    indexes = [r["extra_info"]["index"] for r in rows + val.to_pylist()]
    assert len(set(indexes)) == len(indexes)


def test_the_tokenizer_loads_with_the_tokenizers_library_and_knows_qwen3_s_special_tokens(files):
    tokenizer = tokenizers.Tokenizer.from_str(files[f"{MODEL}/tokenizer.json"].decode())
    ids = [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")]
    assert None not in ids
    encoded = tokenizer.encode("<|im_start|>user\nWhat is $2+2$?<|im_end|>\n", add_special_tokens=False)
    assert encoded.ids[0] == ids[1] and ids[2] in encoded.ids
    assert tokenizer.decode(encoded.ids, skip_special_tokens=False) == "<|im_start|>user\nWhat is $2+2$?<|im_end|>\n"
    config = json.loads(files[f"{MODEL}/tokenizer_config.json"])
    assert config["chat_template"] == CHAT_TEMPLATE
    assert (config["tokenizer_class"], config["eos_token"], config["pad_token"]) == \
           ("Qwen2Tokenizer", "<|im_end|>", "<|endoftext|>")
    assert {config["added_tokens_decoder"][str(i)]["content"] for i in ids} == {"<|endoftext|>", "<|im_start|>",
                                                                                "<|im_end|>"}
    assert json.loads(files[f"{MODEL}/special_tokens_map.json"])["eos_token"] == "<|im_end|>"


def test_the_chat_template_is_chatml():
    chat = [{"role": "user", "content": "What is $2+2$?"}]
    assert rendered(chat) == "<|im_start|>user\nWhat is $2+2$?<|im_end|>\n<|im_start|>assistant\n"
    assert rendered(chat, add_generation_prompt=False) == "<|im_start|>user\nWhat is $2+2$?<|im_end|>\n"


def test_some_training_prompts_are_longer_than_max_prompt_length_with_the_template_applied(files):
    tokenizer = tokenizers.Tokenizer.from_str(files[f"{MODEL}/tokenizer.json"].decode())
    limit = SPEC.data.max_prompt_length
    assert limit == 2048

    def length(row):   # verl: len(tokenizer.apply_chat_template(doc[prompt_key], add_generation_prompt=True))
        return len(tokenizer.encode(rendered(row["prompt"]), add_special_tokens=False).ids)

    train = [length(r) for r in table(files[SPEC.data.train_files]).to_pylist()]
    val = [length(r) for r in table(files[SPEC.data.val_files]).to_pylist()]
    assert sum(n > limit for n in train) == OVERLONG_ROWS == 8
    assert max(n for n in train if n <= limit) < limit // 4 and max(val) < limit // 4
    assert staged_data(SPEC).overlong == [i for i, n in enumerate(train) if n > limit]


def test_the_long_problems_still_have_their_answers(files):
    rows = table(files[SPEC.data.train_files]).to_pylist()
    for i in staged_data(SPEC).overlong:
        text = rows[i]["prompt"][0]["content"]
        values = [int(line.split("$")[1]) for line in text.splitlines() if line.startswith("Station ")]
        assert str(sum(values)) == rows[i]["reward_model"]["ground_truth"]


def test_staging_is_deterministic(files):
    assert job_files(SPEC) == files


def test_the_long_rows_follow_the_spec_s_max_prompt_length():
    short = dataclasses.replace(SPEC, data=dataclasses.replace(SPEC.data, max_prompt_length=512))
    data = staged_data(short)
    tokenizer = data.tokenizer
    lengths = [len(tokenizer.encode(rendered(r["prompt"]), add_special_tokens=False).ids) for r in data.train]
    assert len(data.overlong) == OVERLONG_ROWS and all(512 < lengths[i] < 2048 for i in data.overlong)


def test_several_data_files_share_the_rows_and_json_is_json_lines(tmp_path):
    data = dataclasses.replace(SPEC.data, train_files=("/data/dapo/a.parquet", "/data/dapo/b.parquet"),
                               val_files="/data/dapo/val.json")
    files = job_files(dataclasses.replace(SPEC, data=data))
    a, b = table(files["/data/dapo/a.parquet"]), table(files["/data/dapo/b.parquet"])
    assert (a.num_rows, b.num_rows) == (160, 160)
    val = [json.loads(line) for line in files["/data/dapo/val.json"].decode().splitlines()]
    assert len(val) == VAL_ROWS and list(val[0]) == COLUMNS


def test_products_by_npu_count():
    assert (product_name(8), product_name(16)) == ("Atlas 800T A2", "Atlas 200T A2 Box16")


def test_the_dry_mode_entry_point_reads_the_data_with_the_real_libraries():
    from dapo_sim.standin_dapo import MAIN_DAPO

    compile(MAIN_DAPO, "main_dapo.py", "exec")
    for call in ('AutoTokenizer.from_pretrained(name_or_path', 'datasets.load_dataset("parquet", data_files=',
                 "datasets.concatenate_datasets(dataframes)", "tokenizer.apply_chat_template(doc[prompt_key], "
                 "add_generation_prompt=True", "auth.read_netrc_auth(", "from wandb.errors import UsageError"):
        assert call in MAIN_DAPO, call
    assert "class UsageError" not in MAIN_DAPO and "Unable to find" not in MAIN_DAPO


# What the dry run's libraries print when the data or the model is wrong (datasets 4.4.2, pyarrow 22.0.0,
# transformers 4.57.3 / huggingface_hub 0.36.0, captured from the stand-in's TaskRunner): doctor knows each.
REAL_ERRORS = [
    ("Failed to read schema from '/data/dapo/dapo-math-17k.parquet' with error ArrowInvalid: Parquet magic bytes not "
     "found in footer. Either the file is corrupted or this is not a parquet file.", "verl-data-file-unreadable"),
    ("pyarrow.lib.ArrowInvalid: Parquet magic bytes not found in footer. Either the file is corrupted or this is not a "
     "parquet file.", "verl-data-file-unreadable"),
    ("Failed to read schema from '/data/dapo/aime-2024.parquet' with error ArrowInvalid: Parquet file size is 0 bytes",
     "verl-data-file-unreadable"),
    ("OSError: Couldn't deserialize thrift: No more data to read.", "verl-data-file-unreadable"),
    ("datasets.exceptions.DatasetGenerationError: An error occurred while generating the dataset",
     "verl-data-file-unreadable"),
    ("FileNotFoundError: Unable to find '/data/dapo/dapo-math-17k.parquet'", "verl-data-or-model-missing"),
    ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
     "'/data/models/Qwen3-30B-A3B'. Use `repo_type` argument if needed.", "verl-data-or-model-missing"),
    ("ValueError: Unrecognized model in /data/models/Qwen3-30B-A3B. Should have a `model_type` key in its "
     "config.json, or contain one of the following strings in its name: aimv2", "verl-data-or-model-missing"),
]


@pytest.mark.parametrize("line, signature", REAL_ERRORS)
def test_doctor_knows_the_dry_run_s_real_errors(line, signature):
    from dapo_ops.doctor.signatures import default_catalog

    found = default_catalog().match(line)
    assert found is not None and found[0].id == signature
    if line.startswith("Failed to read schema"):
        assert found[1]["data_file"].startswith("/data/dapo/")
