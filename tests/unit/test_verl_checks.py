"""`dapo-ops validate` on the composed configuration: an `extra_overrides` entry cannot bypass a check, verl's own
start-up checks run offline, the ones that need torch/vLLM are reproduced, values out of range are refused; each
mistake is one line naming the key, with exit 2. verl v0.7.0's DAPO NPU scripts, translated, validate."""

import copy
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from dapo_ops.job.composed import fold
from dapo_ops.job.model_facts import KNOWN
from dapo_ops.job.overrides import PLUS_ALLOWED
from dapo_ops.job.spec import parse_spec
from dapo_ops.job.verl_checks import registered_reward_managers
from dapo_ops.job.verl_offline import run_verl_checks, verl_modules
from tests.cli_runner import run_cli
from tests.unit.test_job import DATA, INVENTORY, SEED, mutate, seed

UPSTREAM = DATA / "jobs" / "upstream"
AR = "actor_rollout_ref"


def extra(*overrides):
    return mutate("extra_overrides", list(overrides))


def both(*changes):
    def apply(data):
        for change in changes:
            data = change(data)
        return data
    return apply


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
     "trainer.loggers has wandb, which needs WANDB_API_KEY: list it under secrets"),
    ("a logger that is a number", extra("trainer.logger=7"), "trainer.logger: expected a list of strings, got 7"),
    ("no nodes", extra("trainer.nnodes=0"), "trainer.nnodes is overridden to 0 but the job is placed on 2 node(s)"),
    ("an overlong buffer of banana", extra("reward_model.overlong_buffer.len=banana"),
     "reward_model.overlong_buffer.len: expected a whole number, got 'banana'"),
    ("a relative model path through extra_overrides", extra(f"{AR}.model.path=models/qwen"),
     f"{AR}.model.path 'models/qwen' must be an absolute path on the nodes"),
]
VERL_OWN = [
    ("unknown loss_agg_mode", mutate("algorithm.loss_agg_mode", "bogus"),
     f"{AR}.actor.loss_agg_mode: Invalid loss_agg_mode: bogus (verl/workers/config/actor.py"),
    ("temperature 0 with do_sample", mutate("rollout.temperature", 0),
     f"{AR}.rollout.temperature: validation gen temperature should be greater than 0 when enabling do_sample "
     "(verl/utils/config.py"),
    ("no micro-batch size with dynamic batch size off", mutate("actor.use_dynamic_bsz", False),
     "Please set at least one of 'actor.ppo_micro_batch_size' or 'actor.ppo_micro_batch_size_per_gpu' if "
     "use_dynamic_bsz is not enabled."),
    ("both micro-batch spellings", both(mutate("actor.use_dynamic_bsz", False),
                                        extra(f"{AR}.actor.ppo_micro_batch_size=32",
                                              f"{AR}.actor.ppo_micro_batch_size_per_gpu=1")),
     "You have set both 'actor.ppo_micro_batch_size' AND 'actor.ppo_micro_batch_size_per_gpu'"),
    ("unknown lr scheduler", extra(f"{AR}.actor.optim.lr_scheduler_type=linear"),
     f"{AR}.actor.optim.lr_scheduler_type: assert self.lr_scheduler_type in"),
    ("unknown router replay mode", extra(f"{AR}.actor.router_replay.mode=R9"),
     f"{AR}.actor.router_replay.mode: Invalid router_replay mode: R9"),
    ("pipeline parallel vLLM", extra(f"{AR}.rollout.pipeline_model_parallel_size=2"),
     f"{AR}.rollout.pipeline_model_parallel_size: Current rollout self.name='vllm' not implemented"),
    ("expert parallel size not TP x DP", extra(f"{AR}.rollout.expert_parallel_size=4"),
     f"{AR}.rollout.expert_parallel_size: expert_parallel_size must be equal to tensor_model_parallel_size"),
    ("reference FSDP strategy", extra(f"{AR}.ref.fsdp_config.strategy=ddp"),
     f"{AR}.ref.fsdp_config.strategy: strategy ddp not supported (verl/workers/config/engine.py"),
    ("misspelled logger", mutate("trainer.loggers", ["console", "tensorbord"]),
     "trainer.logger (from trainer.loggers) has 'tensorbord': verl's Tracking asserts 'tensorbord is not supported'"),
]
REPRODUCED = [
    ("heads vs Ulysses SP", both(mutate("model.architecture.attention_heads", 40),
                                 mutate("actor.ulysses_sequence_parallel_size", 16)),
     "'num_attention_heads 40 must be divisible by ulysses_sp_size 16' (verl/models/transformers/monkey_patch.py"),
    ("KV heads vs Ulysses SP", both(mutate("model.architecture.kv_heads", 6),
                                    mutate("actor.ulysses_sequence_parallel_size", 16)),
     "'num_key_value_heads 6 must be divisible by ulysses_sp_size 16 or vise versa'"),
    ("heads vs vLLM TP", both(mutate("model.architecture.attention_heads", 28),
                              mutate("actor.ulysses_sequence_parallel_size", 4),
                              mutate("rollout.tensor_parallel_size", 8)),
     "'Total number of attention heads (28) must be divisible by tensor parallel size (8).'"),
    ("KV heads vs vLLM TP", both(mutate("model.architecture.kv_heads", 6),
                                 mutate("actor.ulysses_sequence_parallel_size", 2),
                                 mutate("rollout.tensor_parallel_size", 4)),
     "6 KV heads split over neither 4 NPUs nor whole copies"),
    ("max_num_batched_tokens below one sequence without chunked prefill",
     both(mutate("rollout.enable_chunked_prefill", False), extra(f"{AR}.rollout.max_num_batched_tokens=8192")),
     f"{AR}.rollout.max_num_batched_tokens 8192 cannot hold one 22528-token sequence"),
    ("max_num_batched_tokens below max_num_seqs", mutate("rollout.max_num_seqs", 30000),
     "'max_num_batched_tokens (22528) must be greater than or equal to max_num_seqs (30000).'"),
    ("micro-batch not dividing the normalised mini-batch",
     both(mutate("actor.use_dynamic_bsz", False), extra(f"{AR}.actor.ppo_micro_batch_size_per_gpu=3",
                                                         f"{AR}.rollout.log_prob_micro_batch_size_per_gpu=1")),
     "'normalized ppo_mini_batch_size 128 should be divisible by ppo_micro_batch_size_per_gpu 3'"),
    ("FSDP size not dividing the world", mutate("actor.fsdp_size", 5),
     f"{AR}.actor.fsdp_config.fsdp_size 5 does not divide the world size 32"),
    ("reference log-prob budget below one sequence", extra(f"{AR}.ref.log_prob_max_token_len_per_gpu=1024"),
     f"{AR}.ref.log_prob_max_token_len_per_gpu 1024 x SP 8 cannot hold one 22528-token sequence"),
    ("critic strategy", extra("critic.strategy=megatron"), "recipe/dapo/main_dapo.py TaskRunner.run asserts it"),
    ("unknown actor strategy", extra(f"{AR}.actor.strategy=deepspeed"),
     f"{AR}.actor.strategy 'deepspeed': recipe/dapo/main_dapo.py TaskRunner.run raises NotImplementedError"),
    ("unknown rollout engine", mutate("rollout.name", "banana"), "'Unknown rollout mode: banana. Available:"),
    ("SGLang rollout", mutate("rollout.name", "sglang"), "the stack installs vLLM and vllm-ascend only"),
    ("unregistered reward manager", extra("reward_model.reward_manager=dapoo"),
     "reward_manager.name 'dapoo': 'Reward manager is not registered'"),
    ("overlong buffer longer than the response", mutate("algorithm.overlong_buffer.len", 30000),
     "'max_resp_len must be larger than overlong_buffer.len'"),
    ("dual-clip bound", mutate("algorithm.clip_ratio_c", 0.5),
     "'The lower bound of the clip_ratio_c for dual-clip PPO should be greater than 1.0'"),
    ("filter groups without a metric", extra("algorithm.filter_groups.metric=null"),
     "algorithm.filter_groups.metric None: filter_groups.enable needs a metric"),
]
RANGES = [
    ("negative learning rate", mutate("algorithm.lr", -1e-6),
     f"{AR}.actor.optim.lr (from algorithm.lr) -1e-06 must be a positive number"),
    ("negative learning rate through extra_overrides", extra(f"{AR}.actor.optim.lr=-1e-6"),
     f"{AR}.actor.optim.lr -1e-06 must be a positive number"),
    ("NaN gpu_memory_utilization", mutate("rollout.gpu_memory_utilization", float("nan")),
     f"{AR}.rollout.gpu_memory_utilization (from rollout.gpu_memory_utilization) nan must be in (0, 1]"),
    ("gpu_memory_utilization above 1", mutate("rollout.gpu_memory_utilization", 1.5),
     f"{AR}.rollout.gpu_memory_utilization (from rollout.gpu_memory_utilization) 1.5 must be in (0, 1]"),
    ("composed port past 65535", extra(f"{AR}.rollout.prometheus.port=70000"),
     f"{AR}.rollout.prometheus.port 70000 is not a port"),
    ("negative training temperature", mutate("rollout.temperature", -1.0), f"{AR}.rollout.temperature"),
    ("negative validation temperature", extra(f"{AR}.rollout.val_kwargs.temperature=-0.5"),
     f"{AR}.rollout.val_kwargs.temperature -0.5 must be >= 0"),
    ("top_p 0", mutate("rollout.top_p", 0.0), f"{AR}.rollout.top_p 0.0 must be in (0, 1]"),
    ("validation top_p above 1", mutate("rollout.val_top_p", 1.5), f"{AR}.rollout.val_kwargs.top_p 1.5 must be in"),
    ("top_k -2", mutate("rollout.top_k", -2), f"{AR}.rollout.top_k -2 must be -1, 0 or a positive whole number"),
    ("negative weight decay", mutate("algorithm.weight_decay", -0.1), f"{AR}.actor.optim.weight_decay -0.1 must be"),
    ("gradient clip 0", mutate("algorithm.grad_clip", 0.0), f"{AR}.actor.grad_clip 0.0 must be a positive number"),
    ("a learning rate of words", extra(f"{AR}.actor.optim.lr=fast"),
     f"{AR}.actor.optim.lr: expected a number, got 'fast'"),
]
CASES = OVERRIDES_CHECKED + VERL_OWN + REPRODUCED + RANGES


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
    assert all(line.startswith(("HBM per NPU", "host memory per node", "checkpoint per node", "warning:"))
               for line in others), others
    assert "Traceback" not in result.stderr and message in report["errors"][0]   # --json lists the problems
    assert all("\n" not in error for error in report["errors"])


def without_architecture(data: dict) -> dict:
    del data["model"]["architecture"]
    return data


def test_model_facts_come_from_config_json_when_readable_and_the_spec_may_omit_them(tmp_path):
    model = tmp_path / "Qwen3-30B-A3B"
    model.mkdir()
    config = dict(KNOWN["Qwen3-30B-A3B"][0], num_attention_heads=36)
    (model / "config.json").write_text(json.dumps(config))
    result, _ = validate(tmp_path, without_architecture(mutate("model.path", str(model))(seed())))
    assert result.returncode == 2
    assert "'num_attention_heads 36 must be divisible by ulysses_sp_size 8'" in result.stderr
    assert f"heads: {model}/config.json" in result.stderr
    config.update(num_attention_heads=32, max_position_embeddings=16384)
    (model / "config.json").write_text(json.dumps(config))
    result, report = validate(tmp_path, without_architecture(mutate("model.path", str(model))(seed())))
    assert result.returncode == 2 and "exceeds the model's max_position_embeddings 16384" in result.stderr
    assert report["warnings"] == []


def test_a_value_in_the_spec_overrides_config_json_with_a_warning_naming_both(tmp_path):
    model = tmp_path / "Qwen3-30B-A3B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(dict(KNOWN["Qwen3-30B-A3B"][0], max_position_embeddings=16384)))
    result, report = validate(tmp_path, mutate("model.path", str(model))(seed()))
    assert result.returncode == 0, result.stderr                 # the spec's 40960 holds prompt + response
    assert report["warnings"] == [f"model.architecture.max_position_embeddings is 40960 but {model}/config.json "
                                  "says 16384 (dapo-ops uses the spec's)"]


def test_model_config_names_the_config_json_when_model_path_is_not_readable(tmp_path):
    config = tmp_path / "copied-config.json"
    config.write_text(json.dumps(dict(KNOWN["Qwen3-30B-A3B"][0], num_key_value_heads=3)))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(without_architecture(mutate("model.path", "/data/models/Private")(seed()))))
    refused = run_cli("validate", job, "-i", INVENTORY)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert ("model.architecture: layers, hidden_size, attention_heads, kv_heads, head_dim, vocab_size, "
            "max_position_embeddings not known from /data/models/Private/config.json (not readable here): pass "
            "--model-config") in refused.stderr
    given = run_cli("validate", job, "-i", INVENTORY, "--model-config", config)
    assert given.returncode == 2 and f"heads: {config}" in given.stderr and "num_key_value_heads 3" in given.stderr
    assert run_cli("render", job, "-i", INVENTORY, "--model-config", config, "-o", tmp_path / "o").returncode == 0
    missing = run_cli("validate", job, "-i", INVENTORY, "--model-config", tmp_path / "nope.json")
    assert missing.returncode == 2 and "--model-config" in missing.stderr and "not a readable JSON" in missing.stderr


def test_override_config_wins_over_the_model_facts(tmp_path):
    result, _ = validate(tmp_path, extra(f"+{AR}.model.override_config.max_position_embeddings=8192")(seed()))
    assert result.returncode == 2 and "exceeds the model's max_position_embeddings 8192" in result.stderr


def test_a_known_model_disagreeing_with_the_architecture_is_a_warning(tmp_path):
    result, report = validate(tmp_path, mutate("model.architecture.kv_heads", 8)(seed()))
    assert result.returncode == 0, result.stderr
    assert report["warnings"] == ["model.architecture.kv_heads is 8 but Qwen3-30B-A3B's config.json "
                                  f"({KNOWN['Qwen3-30B-A3B'][1]}) says 4 (dapo-ops uses the spec's)"]


def test_the_seed_architecture_is_qwen3_30b_a3b_config_json_and_its_parameters_are_counted():
    from dapo_ops.job.model_facts import count_parameters, from_config

    arch = parse_spec(seed()).model.architecture
    known, _ = from_config(KNOWN["Qwen3-30B-A3B"][0])
    assert {k: getattr(arch, k) for k in known if getattr(arch, k) is not None} == \
        {k: v for k, v in known.items() if k != "intermediate_size"}      # the spec gives no dense width (MoE)
    assert count_parameters(known) == pytest.approx(arch.parameters_b, rel=0.002)     # 30.53 counted, 30.5 given
    for name, given in (("Qwen2.5-32B", 32.8), ("Qwen3-8B-Base", 8.19), ("Qwen3-14B-Base", 14.77),
                        ("Qwen2.5-7B-Instruct", 7.62)):        # as their model cards state (no biases counted)
        assert count_parameters(from_config(KNOWN[name][0])[0]) == pytest.approx(given, rel=0.01), name


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


def test_verl_runs_offline_and_leaves_sys_modules_as_it_found_them():
    before = {k for k in sys.modules if k == "verl" or k.startswith("verl.")}
    with verl_modules() as verl:
        assert verl is not None and "file" in verl.tracking.Tracking.supported_backend
    assert {k for k in sys.modules if k == "verl" or k.startswith("verl.")} == before
    assert {"dapo", "naive"} <= registered_reward_managers()
    problems, supported = run_verl_checks({})
    assert supported and problems and all("\n" not in p for p in problems)   # an empty config: verl refuses it


def test_verl_s_modules_are_imported_once_per_process_and_put_back_each_time():
    before = {k: v for k, v in sys.modules.items() if k == "verl" or k.startswith("verl.")}
    with verl_modules() as first:
        config = sys.modules["verl.utils.config"]
    with verl_modules() as second:
        assert second is first and sys.modules["verl.utils.config"] is config
    assert {k: v for k, v in sys.modules.items() if k == "verl" or k.startswith("verl.")} == before


def test_a_verl_that_imports_differently_is_one_problem_not_a_crash(monkeypatch):
    import dapo_ops.job.verl_offline as offline

    before = {k for k in sys.modules if k == "verl" or k.startswith("verl.")}
    monkeypatch.setattr(offline, "WORKER_CONFIGS", (*offline.WORKER_CONFIGS, "no_such_module"))
    problems, supported = run_verl_checks({})
    assert supported is None and len(problems) == 1 and "cannot run offline from the installed verl" in problems[0]
    assert {k for k in sys.modules if k == "verl" or k.startswith("verl.")} == before


@pytest.mark.parametrize("override", [
    f"+{AR}.model.override_config.rope_theta=1000000",               # fsdp_workers.py override_model_config
    f"+{AR}.actor.fsdp_config.mixed_precision.param_dtype=bf16",        # fsdp_workers.py:485 mixed_precision
    f"+{AR}.ref.fsdp_config.mixed_precision.reduce_dtype=fp32",
    f"+{AR}.rollout.engine_kwargs.vllm.swap_space=8",                  # vllm_async_server.py:244 engine_kwargs.vllm
])
def test_the_plus_keys_verl_reads_validate(tmp_path, override):
    result, report = validate(tmp_path, mutate("extra_overrides", [override])(seed()))
    assert result.returncode == 0, result.stderr
    assert len(PLUS_ALLOWED) == 4  # a new prefix needs its reader in verl named and a case here


# verl v0.7.0 recipe/dapo/*npu*.sh, translated: the inventory that gives each its nodes x NPUs
UPSTREAM_JOBS = {
    "dapo-qwen2.5-7b-npu.yaml": "two-nodes",                     # 1 x 16
    "dapo-qwen2.5-32b-npu.yaml": "two-nodes",                    # 2 x 16
    "dapo-qwen3-8b-base-npu.yaml": "two-a2-nodes",               # 1 x 8
    "dapo-qwen3-14b-base-npu.yaml": "two-nodes",                 # 2 x 16
    "dapo-qwen3-moe-30b-base-fsdp-npu.yaml": "eight-box16-nodes",  # 8 x 16
}


def test_every_upstream_npu_script_is_translated():
    assert sorted(p.name for p in UPSTREAM.glob("*.yaml")) == sorted(UPSTREAM_JOBS)


@pytest.mark.parametrize("job, inventory", UPSTREAM_JOBS.items(), ids=list(UPSTREAM_JOBS))
def test_upstream_npu_scripts_validate(job, inventory):
    env = dict(os.environ, WANDB_API_KEY="not-a-real-key")     # two of them log to wandb
    result = run_cli("validate", str(UPSTREAM / job), "-i", str(DATA / "inventory" / inventory), "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["errors"] == [], report["errors"]
    assert Path(UPSTREAM / job).read_text().startswith("# verl v0.7.0 recipe/dapo/run_dapo_")
