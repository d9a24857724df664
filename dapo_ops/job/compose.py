"""verl's DAPO configuration composed through Hydra with a job's overrides (pure, except for reading the config files).

Hydra composes in two steps (hydra/_internal/config_loader_impl.py `_load_configuration_impl`): the defaults list,
which only the config-group overrides change, is loaded and merged; then the value overrides are applied to the
merged configuration one by one (`ConfigLoaderImpl._apply_overrides_to_config`). The first step reads and merges
about thirty YAML files and takes most of a second; a job's overrides are almost all value overrides. So the merged
configuration is remembered per set of group overrides, and each job's value overrides are applied to a copy of it by
Hydra's own function: the same result and the same errors as a whole `hydra.compose`, which runs instead wherever
this Hydra lacks those functions. tests/unit/test_compose.py holds both ways to the same results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dapo_ops.job.memo import Memo, fingerprint
from dapo_ops.job.override_hints import override_hint
from dapo_ops.job.overrides import PLUS_ALLOWED
from dapo_ops.job.spec import SpecError

CONFIG_NAME = "dapo_trainer"


@dataclass(frozen=True)
class ConfigSources:
    trainer_config: Path      # verl/trainer/config (ppo_trainer.yaml and its groups)
    recipe_config: Path       # the directory holding dapo_trainer.yaml
    described: str            # where they came from, for messages


COMPOSED = Memo()   # (files, overrides) -> the composed configuration as plain containers
MERGED = Memo(8)    # (files, group overrides) -> Hydra's merged DictConfig, before the value overrides


def compose(sources: ConfigSources, job_overrides: list[str]) -> dict:
    """Compose dapo_trainer with the overrides; an unknown or misspelled key raises SpecError naming it."""
    for item in job_overrides:
        if item.startswith("+") and not item.startswith(PLUS_ALLOWED) or item.startswith("++"):
            raise SpecError(f"override {item.split('=')[0]!r} adds a key verl does not have; only "
                            f"{', '.join(p + '*' for p in PLUS_ALLOWED)} may be added")
    files = fingerprint(sources.recipe_config, sources.trainer_config)
    return COMPOSED.get((files, tuple(job_overrides)), lambda: _compose(sources, files, job_overrides))


def _compose(sources: ConfigSources, files: tuple, job_overrides: list[str]) -> dict:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(sources.recipe_config), version_base=None):
            try:
                cfg = _composed_config(sources, files, job_overrides)
            except (HydraException, OmegaConfBaseException, ValueError) as exc:   # ValueError: `data=3`, a group
                failure = str(exc)
            else:
                try:
                    return OmegaConf.to_container(cfg, resolve=True)
                except OmegaConfBaseException as exc:
                    raise SpecError(f"verl's configuration does not resolve: {str(exc).splitlines()[0]}") from None
    finally:
        GlobalHydra.instance().clear()
    try:
        base = compose(sources, []) if job_overrides else {}  # the keys a misspelled one is matched against
    except SpecError:
        base = {}
    raise SpecError(_explain(failure, base))


def _search_path(sources: ConfigSources) -> str:
    return f"hydra.searchpath=[file://{sources.trainer_config}]"


def _composed_config(sources: ConfigSources, files: tuple, job_overrides: list[str]):
    """The composed DictConfig, inside an initialized Hydra; raises Hydra's and OmegaConf's own errors."""
    from hydra import compose as hydra_compose
    from hydra.core.global_hydra import GlobalHydra

    internals = _hydra_internals(GlobalHydra.instance().config_loader())
    if internals is None:   # another Hydra than the lock's: the whole compose, every time
        return hydra_compose(config_name=CONFIG_NAME, overrides=[*job_overrides, _search_path(sources)])
    apply, repository_for = internals
    split = _split(job_overrides, lambda: repository_for(CONFIG_NAME, [_search_path(sources)])[1])
    if split is None:   # an override Hydra cannot parse: its own compose says which
        return hydra_compose(config_name=CONFIG_NAME, overrides=[*job_overrides, _search_path(sources)])
    group_overrides, value_overrides = split
    cfg = MERGED.get((files, tuple(group_overrides)), lambda: hydra_compose(   # a copy of the remembered one
        config_name=CONFIG_NAME, overrides=[*group_overrides, _search_path(sources)]))
    apply(value_overrides, cfg)
    return cfg


def _hydra_internals(loader):
    """Hydra's own two steps (hydra-core 1.3, config_loader_impl.py): the function that applies value overrides and
    the one that makes the config repository a compose reads; None where this Hydra has them no more."""
    apply = getattr(type(loader), "_apply_overrides_to_config", None)
    repository_for = getattr(loader, "_parse_overrides_and_create_caching_repo", None)
    return None if apply is None or repository_for is None else (apply, repository_for)


def _split(job_overrides: list[str], repository):
    """(the overrides that change the defaults list, as written; the value overrides, parsed), or None when Hydra
    cannot parse them. A group override is one whose key is a config group of the search path and whose value is not
    a dict (Hydra's own test, hydra/_internal/defaults_list.py Overrides); sweeps, packages and hydra's own keys go
    with them, to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides=job_overrides)
    except HydraException:
        return None
    repo = repository() if parsed else None
    groups, values = [], []
    for line, override in zip(job_overrides, parsed):
        if (override.package is not None or override.is_sweep_override() or override.is_hydra_override()
                or repo.group_exists(override.key_or_group) and not isinstance(override.value(), dict)):
            groups.append(line)
        else:
            values.append(override)
    return groups, values


def _leaf_keys(node, prefix: str = "") -> list[str]:
    keys = []
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            keys.append(path)
            keys += _leaf_keys(value, path)
    return keys


def _explain(message: str, base: dict) -> str:
    match = re.search(r"Could not override '([^']+)'", message)
    if match:
        key = match.group(1)
        hint = override_hint(key, _leaf_keys(base))
        reason = "not a key of verl's configuration" if "not in struct" in message or "append" in message else \
            message.splitlines()[-1].strip()
        return f"override {key!r}: {reason}{hint}"
    return f"verl's configuration rejects the overrides: {message.splitlines()[0]}"
