"""Composing verl's configuration from a remembered merge gives what one whole `hydra.compose` gives: the same
configuration for every kind of override, and the same error where Hydra refuses one."""

import dataclasses
import math

import pytest
import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dapo_ops.job import compose as composing
from dapo_ops.job.compose import CONFIG_NAME, _composed_config, _search_path
from dapo_ops.job.memo import fingerprint
from dapo_ops.job.overrides import overrides
from dapo_ops.job.spec import parse_spec
from dapo_ops.job.validate import config_sources
from dapo_ops.manifest import load_manifest
from dapo_ops.paths import PROJECT_ROOT

SEED = PROJECT_ROOT / "jobs" / "qwen3-30b-a3b-dapo.yaml"
R = "actor_rollout_ref"
CASES = {
    "none": [],
    "values": ["data.train_batch_size=256", f"{R}.actor.optim.lr=2e-6", "trainer.logger=[console,wandb]"],
    "the same key twice, the last wins": ["data.train_batch_size=256", "data.train_batch_size=128"],
    "added keys": [f"+{R}.model.override_config.attention_dropout=0.0", f"+{R}.actor.new_key=1"],
    "added, then overridden": ["+data.new_key=3", "data.new_key=4"],
    "force-added": [f"++{R}.actor.optim.lr=3e-6"],
    "deleted": [f"~{R}.actor.optim.lr_warmup_steps"],
    "an interpolation": ["data.train_batch_size=${data.gen_batch_size}"],
    "a dict replaced": [f"{R}.actor.checkpoint={{save_contents: [model]}}"],
    "NaN": [f"{R}.rollout.gpu_memory_utilization=nan"],
    "a group override": ["data=legacy_data"],
    "a group override with values": ["data=legacy_data", "data.train_batch_size=64"],
    "a dict over a group's key, in its place": ["data={train_batch_size: 64}", "data.max_prompt_length=7"],
    "a dict over a group's key, last": [f"{R}.actor.optim.lr=2e-6", "algorithm={filter_groups: {enable: false}}"],
    "a package override": ["actor@actor_rollout_ref.actor=dp_actor"],
    "hydra's own key": ["hydra.run.dir=/tmp/elsewhere"],
    # refused
    "an unknown key": ["data.train_batch_sise=256"],
    "an unknown group option": ["algorithm=bogus"],
    "an unknown nested group": [f"{R}/rollout=bogus"],
    "a sweep": ["data.train_batch_size=1,2"],
    "unparseable": ["data.train_batch_size=[1,2"],
    "deleting what is not there": ["~nokey.x"],
    "adding what is there": ["+data.train_batch_size=3"],
    "an interpolation to nowhere": ["data.train_batch_size=${nope.x}"],
    "a section replaced by a number": [f"{R}=3"],
    "a group given a number": ["data=3"],
}


def _result(make):
    """('ok', the configuration) or (the error's kind, its message), as validate reads them."""
    GlobalHydra.instance().clear()
    sources = config_sources(None, load_manifest())
    try:
        with initialize_config_dir(config_dir=str(sources.recipe_config), version_base=None):
            try:
                cfg = make(sources)
                return "ok", OmegaConf.to_container(cfg, resolve=True)
            except (HydraException, OmegaConfBaseException, ValueError) as exc:
                return type(exc).__name__, str(exc)
    finally:
        GlobalHydra.instance().clear()


def whole(job_overrides):
    return _result(lambda s: hydra_compose(config_name=CONFIG_NAME, overrides=[*job_overrides, _search_path(s)]))


def remembered(job_overrides):
    return _result(lambda s: _composed_config(s, fingerprint(s.recipe_config, s.trainer_config), job_overrides))


def same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("job_overrides", CASES.values(), ids=CASES.keys())
def test_a_remembered_merge_composes_what_hydra_composes(job_overrides):
    seed = parse_spec(yaml.safe_load(SEED.read_text()))
    seed = dataclasses.replace(seed, cluster=dataclasses.replace(seed.cluster, npus_per_node=8))   # placed
    with_seed = [*overrides(seed, load_manifest()), *job_overrides]
    expected, got = whole(with_seed), remembered(with_seed)
    assert got[0] == expected[0], (got[0], expected[0], str(got[1])[:300], str(expected[1])[:300])
    assert same(got[1], expected[1])


def test_the_merge_is_remembered_and_never_changed_by_a_job():
    composing.MERGED._results.clear()
    first = remembered(["data.train_batch_size=7"])[1]
    second = remembered([f"~{R}.actor.optim.lr_warmup_steps"])[1]
    assert len(composing.MERGED._results) == 1   # both were value overrides on one merge
    assert first["data"]["train_batch_size"] == 7 and second["data"]["train_batch_size"] != 7
    assert "lr_warmup_steps" in first[R]["actor"]["optim"] and "lr_warmup_steps" not in second[R]["actor"]["optim"]
    remembered(["data=legacy_data"])
    assert len(composing.MERGED._results) == 2   # a group override is a merge of its own


def test_without_hydras_internals_the_whole_compose_runs(monkeypatch):
    monkeypatch.setattr(composing, "_hydra_internals", lambda loader: None)
    composing.MERGED._results.clear()
    got = remembered(["data.train_batch_size=9"])
    assert got[0] == "ok" and got[1]["data"]["train_batch_size"] == 9
    assert not composing.MERGED._results
