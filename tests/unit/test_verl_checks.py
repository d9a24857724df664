"""`dapo-ops validate` on the composed configuration: an `extra_overrides` entry cannot bypass a check; each mistake
is one line naming the key, with exit 2."""

import copy
import json
import os

import pytest
import yaml

from dapo_ops.job.composed import fold
from dapo_ops.job.model_facts import KNOWN
from dapo_ops.job.spec import parse_spec
from tests.cli_runner import run_cli
from tests.unit.test_job import INVENTORY, SEED, mutate, seed

AR = "actor_rollout_ref"


def extra(*overrides):
    return mutate("extra_overrides", list(overrides))


def validate(tmp_path, data, inventory=INVENTORY, env=None):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(data))
    result = run_cli("validate", str(job), "-i", str(inventory), "--json", env=env)
    report = json.loads(result.stdout) if result.stdout.startswith("{") else None
    return result, report


# (label, the one spec mutation, the message's first line holds this)
OVERRIDES_CHECKED = [
    ("TP 3 through extra_overrides", extra(f"{AR}.rollout.tensor_model_parallel_size=3"),
     f"{AR}.rollout.tensor_model_parallel_size 3 does not divide the world size 32"),
    ("a mini-batch of banana", extra(f"{AR}.actor.ppo_mini_batch_size=banana"),
     f"{AR}.actor.ppo_mini_batch_size: expected a whole number, got 'banana'"),
    ("mini-batch larger than the train batch through extra_overrides", extra(f"{AR}.actor.ppo_mini_batch_size=1024"),
     f"{AR}.actor.ppo_mini_batch_size 1024 is larger than data.train_batch_size 512"),
    ("SP 7 through extra_overrides", extra(f"{AR}.actor.ulysses_sequence_parallel_size=7"),
     f"{AR}.actor.ulysses_sequence_parallel_size 7 does not divide the world size 32"),
    ("token budget below one sequence through extra_overrides", extra(f"{AR}.actor.ppo_max_token_len_per_gpu=1024"),
     f"{AR}.actor.ppo_max_token_len_per_gpu x SP = 8192 cannot hold one 22528-token sequence"),
    ("more nodes than placed", extra("trainer.nnodes=3"),
     "trainer.nnodes is overridden to 3 but the job is placed on 2 node(s) of the inventory"),
    ("sync rollout through extra_overrides", extra(f"{AR}.rollout.mode=sync"),
     f"{AR}.rollout.mode 'sync' was removed"),
    ("wandb through extra_overrides without its key", extra("trainer.logger=[console,wandb]"),
     "WANDB_API_KEY is not set"),
]
CASES = OVERRIDES_CHECKED


def test_the_seed_job_still_validates_clean():
    result = run_cli("validate", str(SEED), "-i", str(INVENTORY), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["errors"] == [] and report["warnings"] == []


@pytest.mark.parametrize("label, change, message", CASES, ids=[c[0] for c in CASES])
def test_each_mistake_is_one_line_naming_the_key(tmp_path, label, change, message):
    env = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    result, report = validate(tmp_path, change(copy.deepcopy(seed())), env=env)
    assert result.returncode == 2, (result.stdout, result.stderr)
    failed = [line for line in result.stderr.splitlines() if line.startswith("dapo-ops:")]
    assert len(failed) == 1 and message in failed[0], result.stderr
    others = [line for line in result.stderr.splitlines() if line not in failed]
    assert all(line.startswith(("HBM per NPU", "warning:")) for line in others), others   # nothing from verl
    assert "Traceback" not in result.stderr and all("\n" not in error for error in report["errors"])


def test_model_facts_come_from_config_json_when_readable(tmp_path):
    model = tmp_path / "Qwen3-30B-A3B"
    model.mkdir()
    config = {"num_attention_heads": 32, "num_key_value_heads": 4, "hidden_size": 2048,
              "max_position_embeddings": 16384}
    (model / "config.json").write_text(json.dumps(config))
    result, report = validate(tmp_path, mutate("model.path", str(model))(seed()))
    assert result.returncode == 2 and "exceeds the model's max_position_embeddings 16384" in result.stderr
    assert any("model.architecture.max_position_embeddings is 40960 but" in w for w in report["warnings"])


def test_override_config_wins_over_the_model_facts(tmp_path):
    result, _ = validate(tmp_path, extra(f"+{AR}.model.override_config.max_position_embeddings=8192")(seed()))
    assert result.returncode == 2 and "exceeds the model's max_position_embeddings 8192" in result.stderr


def test_a_known_model_disagreeing_with_the_architecture_is_a_warning(tmp_path):
    result, report = validate(tmp_path, mutate("model.architecture.kv_heads", 8)(seed()))
    assert result.returncode == 0, result.stderr
    assert report["warnings"] == ["model.architecture.kv_heads is 8 but Qwen3-30B-A3B's config.json "
                                  f"({KNOWN['Qwen3-30B-A3B'].source}) says 4 (dapo-ops uses the architecture's)"]


def test_the_seed_architecture_is_qwen3_30b_a3b_config_json():
    arch, known = parse_spec(seed()).model.architecture, KNOWN["Qwen3-30B-A3B"]
    assert (arch.attention_heads, arch.kv_heads, arch.hidden_size, arch.max_position_embeddings) == \
        (known.attention_heads, known.kv_heads, known.hidden_size, known.max_position_embeddings)


def test_fold_names_only_what_an_override_changed():
    spec = parse_spec(seed())
    composed = {"trainer": {"nnodes": 2, "logger": "console"}, "data": {"train_batch_size": 512},
                AR: {"rollout": {"tensor_model_parallel_size": 4, "gpu_memory_utilization": float("nan")}}}
    folded = fold(spec, composed)
    assert folded.names == {"rollout.tensor_parallel_size": f"{AR}.rollout.tensor_model_parallel_size",
                            "rollout.gpu_memory_utilization": f"{AR}.rollout.gpu_memory_utilization",
                            "trainer.loggers": "trainer.logger"}
    assert folded.spec.rollout.tensor_parallel_size == 4 and folded.spec.trainer.loggers == ("console",)
    assert folded.problems == []
