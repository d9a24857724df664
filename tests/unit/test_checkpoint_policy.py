"""The checkpoint policy (dapo_ops/job/checkpoints.py): steps or minutes, how many are kept, where, and how verl is
told to resume."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from dapo_ops.job.checkpoints import CheckpointRun, policy, run_pairs, step_seconds_estimate
from dapo_ops.job.overrides import overrides
from dapo_ops.job.spec import SpecError, parse_spec
from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT

SEED = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"


def placed(npus_per_node: int = 8, **trainer):
    spec = parse_spec(yaml.safe_load(SEED.read_text()))
    cluster = dataclasses.replace(spec.cluster, nodes=2, npus_per_node=npus_per_node)
    return dataclasses.replace(spec, cluster=cluster, trainer=dataclasses.replace(spec.trainer, **trainer))


def test_the_step_time_is_the_batch_s_tokens_at_the_seed_s_throughput_per_npu():
    # 512 prompts x 16 responses x (2048 + 20480 / 2) tokens, at 12,800 tokens/s / 32 NPUs = 400 per NPU
    tokens = 512 * 16 * (2048 + 10240)
    assert step_seconds_estimate(placed(8)) == pytest.approx(tokens / (400 * 16))
    assert step_seconds_estimate(placed(16)) == pytest.approx(tokens / (400 * 32))


def test_minutes_become_the_most_steps_that_stay_within_them():
    assert policy(placed(16)).save_freq == 1                       # a step of the seed's batch is over an hour
    small = dataclasses.replace(placed(16, save_every_minutes=90.0),
                                data=dataclasses.replace(placed(16).data, train_batch_size=16, gen_batch_size=48))
    seconds = step_seconds_estimate(small)                         # 16 x 16 x 12288 / 12800 = 245.76 s
    assert seconds == pytest.approx(245.76)
    assert policy(small).save_freq == 21                           # 21 steps = 86 min; 22 would be 90.1
    assert policy(small).minutes == 90.0 and policy(small).keep == 2


def test_a_step_count_is_taken_as_given_and_minus_one_saves_nothing():
    assert policy(placed(save_freq=20)).save_freq == 20
    never = policy(placed(save_freq=-1))
    assert not never.saves and "verl saves no checkpoint, not even at the last step" in never.describe()


@pytest.mark.parametrize("trainer, message", [
    ({"save_freq": 5, "save_every_minutes": 30.0}, "give one of them"),
    ({"save_freq": 0}, "trainer.save_freq: 0 is not a step count"),
    ({"save_freq": -3}, "trainer.save_freq: -3 is not a step count"),
    ({"save_every_minutes": 0.0}, "trainer.save_every_minutes: 0 must be"),
    ({"save_every_minutes": float("inf")}, "trainer.save_every_minutes: inf must be"),
    ({"keep_checkpoints": 0}, "trainer.keep_checkpoints: 0 keeps no step"),
])
def test_a_policy_verl_would_misread_is_refused_with_the_field_named(trainer, message):
    with pytest.raises(SpecError, match=message):
        policy(placed(**trainer))


def test_a_launched_chain_has_its_own_directory_and_a_resume_names_its_step():
    spec = placed()
    root = "/var/lib/dapo-ops/checkpoints/verl-dapo/qwen3-30b-a3b-dapo"
    assert run_pairs(spec, None) == [("trainer.default_local_dir", root)]
    assert run_pairs(spec, CheckpointRun("r1")) == [("trainer.default_local_dir", f"{root}/r1"),
                                                   ("trainer.resume_mode", "disable")]
    assert run_pairs(spec, CheckpointRun("r1", 7)) == [
        ("trainer.default_local_dir", f"{root}/r1"), ("trainer.resume_mode", "resume_path"),
        ("trainer.resume_from_path", f"{root}/r1/global_step_7")]
    rendered = overrides(spec, load_manifest(), run=CheckpointRun("r1", 7))
    assert "trainer.save_freq=1" in rendered and "trainer.max_actor_ckpt_to_keep=2" in rendered
    assert f"trainer.resume_from_path={root}/r1/global_step_7" in rendered
