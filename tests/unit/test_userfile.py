"""User files (job specs): bounded, UTF-8, no aliases, depth-limited, no duplicate keys, YAML 1.2 numbers and
booleans without silently lost digits; every refusal one line `what path:line:col: problem`, exit code 2."""

import json
import math
import re
import time
from pathlib import Path

import pytest
import yaml

from dapo_ops.errors import UsageError
from dapo_ops.job.spec import SpecError, load_spec, parse_spec
from dapo_ops.paths import PROJECT_ROOT
from dapo_ops.userfile import (MAX_DEPTH, MAX_YAML_BYTES, NumberText, UserFileError, load_json, load_yaml,
                               parse_json, parse_yaml)
from tests.cli_runner import run_cli

SEED = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"
INVENTORY = Path(__file__).parent.parent / "data" / "inventory" / "two-nodes"

BILLION_LAUGHS = 'lol: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi"))


def refused(text: str) -> str:
    """The one-line message parse_yaml gives for `text` (which it must refuse)."""
    with pytest.raises(UserFileError) as caught:
        parse_yaml(text, "job.yaml", "job spec")
    message = str(caught.value)
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2
    assert "\n" not in message and message.startswith("job spec job.yaml:"), message
    return message


def test_alias_bomb_is_refused_at_its_first_anchor_at_once():
    started = time.monotonic()
    message = refused(BILLION_LAUGHS)
    assert time.monotonic() - started < 0.5
    assert message.startswith("job spec job.yaml:1:6: anchor &a: anchors and aliases are not allowed"), message
    assert "alias *x" in refused("a: 1\nb: *x\n")   # an alias alone too (PyYAML would say "undefined alias")


@pytest.mark.parametrize("text", ["[" * 10000 + "]" * 10000, "{a: " * 10000 + "1" + "}" * 10000,
                                  "".join(" " * i + "k:\n" for i in range(10000)), "- " * 10000 + "x\n"],
                         ids=["flow sequences", "flow mappings", "block mappings", "block sequences"])
def test_deep_nesting_is_refused_where_it_passes_the_limit(text):
    started = time.monotonic()
    message = refused(text)
    assert time.monotonic() - started < 2
    assert f"nested deeper than {MAX_DEPTH} levels" in message
    parse_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, "ok.yaml")   # the limit itself is fine


def test_a_latin1_file_names_the_first_bad_byte(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_bytes("name: x\ntrainer:\n  experiment_name: café\n".encode("latin-1"))
    with pytest.raises(UserFileError) as caught:
        load_yaml(job, "job spec")
    assert str(caught.value) == (f"job spec {job}:3:23: not UTF-8: byte 0xE9 at byte offset 39 cannot be decoded "
                                 "(save the file as UTF-8)")


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_bytes(b"# padding\n" * (2 * MAX_YAML_BYTES // 10))    # 2 MiB
    with pytest.raises(UserFileError, match=r"job\.yaml: 2097150 bytes, over the 1 MiB limit; not read$"):
        load_yaml(job, "job spec")
    if Path("/dev/zero").exists():   # no size to check first: read bounded
        with pytest.raises(UserFileError, match=r"/dev/zero: over the 1 MiB limit; not read$"):
            load_yaml("/dev/zero", "job spec")


def test_duplicate_keys_are_refused_naming_the_key_and_both_lines():
    message = refused("name: a\nmodel:\n  path: /x\n  layers: 2\n  path: /y\n")
    assert message == "job spec job.yaml:5:3: duplicate key 'path' (first at line 3, again at line 5)"
    assert "duplicate key 'name'" in refused("name: a\n\nname: b\n")


def test_yaml_12_numbers_are_floats():
    data = parse_yaml("lr: 1e-6\na: 1E5\nb: .5\nc: 1.0e-06\nd: -2.5e+3\ne: 5.\nf: .inf\ng: 0.28\nh: 1.0\ni: -1\n", "x")
    assert data == {"lr": 1e-06, "a": 100000.0, "b": 0.5, "c": 1e-06, "d": -2500.0, "e": 5.0, "f": math.inf,
                    "g": 0.28, "h": 1.0, "i": -1}
    assert isinstance(data["lr"], float) and isinstance(data["i"], int)


@pytest.mark.parametrize("written, read_as", [("2024.10", "2024.1"), ("0.50", "0.5"), ("1_000", "1000"),
                                              ("0o17", "15"), ("0x1F", "31"), ("010", "8 or 10"), ("1e400", "inf"),
                                              ("1e-400", "0.0"), ("12:30", "750"), ("0.10000000000000000001", "0.1")])
def test_numbers_that_lose_written_digits_are_refused_in_a_text_field_with_a_quote_hint(tmp_path, written, read_as):
    job = tmp_path / "job.yaml"
    job.write_text(seed_with("experiment_name: qwen3-30b-a3b-dapo", f"experiment_name: {written}"))
    line = 1 + SEED.read_text().split("experiment_name:")[0].count("\n")
    with pytest.raises(SpecError) as caught:
        load_spec(job)
    assert str(caught.value) == (
        f'job spec {job}:{line}:20: trainer.experiment_name: {written} would be read as the number {read_as}, not as '
        f'written: quote it ("{written}") to keep the text, or write the number plainly')
    assert parse_yaml(f'experiment_name: "{written}"', "x") == {"experiment_name": written}
    assert parse_yaml(f"experiment_name: {written}", "x")["experiment_name"] == NumberText(written, 1, 18)


@pytest.mark.parametrize("written, value", [("0.90", 0.9), ("5e-7", 5e-7), ("1.0e-6", 1e-6), ("2024.10", 2024.1),
                                            ("1.00", 1.0), ("0.10000000000000000001", 0.1), ("07.5", 7.5)])
def test_a_float_field_takes_any_float_as_written(written, value):
    spec = parse_spec(parse_yaml(seed_with("gpu_memory_utilization: 0.8", f"gpu_memory_utilization: {written}"),
                                 "job.yaml", "job spec"))
    assert spec.rollout.gpu_memory_utilization == value


@pytest.mark.parametrize("written", ["010", "1_000", "0x1F", "1e400", "1e-400", "12:30"])
def test_a_float_field_refuses_what_readers_read_differently_or_out_of_range(written):
    with pytest.raises(SpecError, match=rf"^rollout\.gpu_memory_utilization: {written} would be read as the number"):
        parse_spec(parse_yaml(seed_with("gpu_memory_utilization: 0.8", f"gpu_memory_utilization: {written}"),
                              "job.yaml", "job spec"))


@pytest.mark.parametrize("field, old, written", [("rollout.max_num_seqs", "max_num_seqs: 128", "0128"),
                                                 ("data.max_prompt_length", "max_prompt_length: 2048", "2_048"),
                                                 ("env.extra.FOO", "hccl_exec_timeout: 3600",
                                                  "hccl_exec_timeout: 3600\n  extra: {FOO: 0.50}")])
def test_an_integer_or_text_field_refuses_a_number_not_as_written(field, old, written):
    text = seed_with(old, written if "\n" in written else f"{old.split(':')[0]}: {written}")
    with pytest.raises(SpecError, match=rf"^{re.escape(field)}: "):
        parse_spec(parse_yaml(text, "job.yaml", "job spec"))


def test_only_true_and_false_are_booleans():
    data = parse_yaml("a: yes\nb: no\nc: on\nd: off\ne: true\nf: False\ng: TRUE\nh: 2024-10-01\ni: ~\nj:\n", "x")
    assert data == {"a": "yes", "b": "no", "c": "on", "d": "off", "e": True, "f": False, "g": True,
                    "h": "2024-10-01", "i": None, "j": None}


def test_multi_line_yaml_errors_become_one_line_with_line_and_column():
    assert refused("a:\n  b: 1\n c: 2\n") == ("job spec job.yaml:3:2: expected <block end>, but found '<block mapping "
                                              "start>' (while parsing a block mapping at 1:1)")
    assert refused("a: [1, 2\n").startswith("job spec job.yaml:2:1: ")
    assert refused("a: 1\n---\nb: 2\n").startswith("job spec job.yaml:2:1: but found another document")
    assert refused("a: \x07\n") == ("job spec job.yaml:1:4: unacceptable character #x0007: special characters are "
                                    "not allowed")


def test_tags_and_complex_keys_are_refused():
    assert "tag !!python/object/apply:os.system: tags are not allowed" in refused(
        "a: !!python/object/apply:os.system [true]\n")
    assert "tag !!str: tags are not allowed" in refused("a: !!str 2024.10\n")
    assert "a key must be a plain value" in refused("? [a, b]\n: 1\n")


def test_the_seed_job_reads_as_before():
    assert load_spec(SEED) == parse_spec(yaml.safe_load(SEED.read_text()))


def test_json_files_get_the_same_care(tmp_path):
    assert parse_json('{"a": [1, 2]}', "b.json") == {"a": [1, 2]}
    broken = '{"a":\n  1, }'
    try:   # the json module's own words and column for it, which differ between Python versions
        json.loads(broken)
    except json.JSONDecodeError as exc:
        expected = f"bundle b.json:{exc.lineno}:{exc.colno}: {exc.msg}"
    with pytest.raises(UserFileError) as raised:
        parse_json(broken, "b.json", "bundle")
    assert str(raised.value) == expected
    with pytest.raises(UserFileError, match="duplicate key 'a'"):
        parse_json('{"a": 1, "a": 2}', "b.json")
    with pytest.raises(UserFileError, match="nested deeper than"):
        parse_json("[" * 100000 + "]" * 100000, "b.json")
    with pytest.raises(UserFileError, match="nested deeper than"):
        parse_json("[" * 40 + "]" * 40, "b.json")
    latin = tmp_path / "b.json"
    latin.write_bytes('{"host": "nœud"}'.encode("cp1252"))
    with pytest.raises(UserFileError, match=r"b\.json:1:12: not UTF-8: byte 0x9C at byte offset 11"):
        load_json(latin, "bundle")


# ------------------------------------------------------------------------------------------------ through the CLI

def seed_with(old: str, new: str) -> str:
    text = SEED.read_text()
    assert old in text
    return text.replace(old, new, 1)


CLI_CASES = [
    ("alias bomb", lambda: BILLION_LAUGHS, "anchor &a"),
    ("deep nesting", lambda: "[" * 10000 + "]" * 10000, "nested deeper than 32"),
    ("latin-1", lambda: seed_with("experiment_name: qwen3-30b-a3b-dapo", "experiment_name: qwen3-café")
     .encode("latin-1"), "not UTF-8: byte 0xE9"),
    ("2 MiB", lambda: seed_with("name:", "#" + "x" * (2 << 20) + "\nname:"), "bytes, over the 1 MiB limit"),
    ("duplicate key", lambda: seed_with("  nodes: 2\n", "  nodes: 2\n  nodes: 1\n"), "duplicate key 'nodes'"),
    ("2024.10", lambda: seed_with("experiment_name: qwen3-30b-a3b-dapo", "experiment_name: 2024.10"),
     "trainer.experiment_name: 2024.10 would be read as the number 2024.1"),
    ("multi-line YAML error", lambda: seed_with("  nodes: 2\n", "  nodes: 2\n nodes: 1\n"),
     ":32:2: expected <block end>"),
    ("tab", lambda: seed_with("  nodes: 2\n", "  nodes:\t\t2\n\tx: 1\n"), "found character '\\t'"),
    ("yes is not a boolean", lambda: seed_with("param_offload: true", "param_offload: yes"),
     "actor.param_offload: expected true or false, got 'yes'"),
]


@pytest.mark.parametrize("label, content, message", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_validate_refuses_with_one_line_and_exit_2(tmp_path, label, content, message):
    job = tmp_path / "job.yaml"
    data = content()
    job.write_bytes(data if isinstance(data, bytes) else data.encode())
    result = run_cli("validate", job, "-i", INVENTORY)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    assert message in result.stderr, result.stderr
    # a file that does not read is named with its position; 'yes' reads (as text) and the spec's field refuses it
    where = "dapo-ops: actor.param_offload: " if label == "yes is not a boolean" else f"dapo-ops: job spec {job}:"
    assert result.stderr.startswith(where), result.stderr


def test_validate_reads_verl_style_numbers_and_quoted_names(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(seed_with("  grad_clip: 1.0\n", "  grad_clip: 1.0\n  lr: 1e-6\n  weight_decay: 1E-1\n")
                   .replace("gpu_memory_utilization: 0.8", "gpu_memory_utilization: 0.90")
                   .replace("experiment_name: qwen3-30b-a3b-dapo", 'experiment_name: "2024.10"'))
    spec = load_spec(job)
    assert spec.algorithm.lr == 1e-06 and spec.algorithm.weight_decay == 0.1
    assert spec.rollout.gpu_memory_utilization == 0.9
    assert spec.trainer.experiment_name == "2024.10"
    result = run_cli("validate", job, "-i", INVENTORY)
    assert result.returncode == 0, result.stderr
