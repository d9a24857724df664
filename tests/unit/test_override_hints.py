"""Hints for an override key verl's configuration lacks: a known move, a key of that name elsewhere, a spelling."""

from dapo_ops.job.override_hints import MOVED_KEYS, override_hint

LEAVES = ["algorithm.filter_groups.max_num_gen_batches", "reward_model.overlong_buffer.len",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.ref.log_prob_micro_batch_size",
          "actor_rollout_ref.rollout.log_prob_micro_batch_size"]


def test_a_key_verl_moved_names_where_the_pinned_verl_has_it_both_ways():
    assert override_hint("reward.reward_kwargs.overlong_buffer_cfg.len", LEAVES) == \
        "; verl moved it: the pinned verl has 'reward_model.overlong_buffer.len' (docs/verl-dapo.md §3.1)"
    newer = ["reward.reward_kwargs.overlong_buffer_cfg.len"]
    assert "the pinned verl has 'reward.reward_kwargs.overlong_buffer_cfg.len'" in \
        override_hint("reward_model.overlong_buffer.len", newer)
    assert all(MOVED_KEYS[new] == old for old, new in MOVED_KEYS.items())


def test_a_key_under_another_parent_is_found_by_its_name_when_only_one_key_has_it():
    assert override_hint("algorithm.max_num_gen_batches", LEAVES) == \
        "; did you mean 'algorithm.filter_groups.max_num_gen_batches'? (a key of that name lives there)"
    # two keys of that name: no guess by name, the closest spelling instead
    assert override_hint("actor_rollout_ref.log_prob_micro_batch_size", LEAVES) == \
        "; did you mean 'actor_rollout_ref.ref.log_prob_micro_batch_size'?"


def test_a_misspelling_gets_the_closest_key_and_nonsense_gets_nothing():
    assert override_hint("actor_rollout_ref.actor.ppo_micro_batch_size_per_npu", LEAVES) == \
        "; did you mean 'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu'?"
    assert override_hint("zzz.qqq", LEAVES) == ""
