"""verl's own configuration checks, run offline on the composed configuration, from the installed verl wheel.

verl's package __init__s import torch, numpy, ray and transformers (verl/__init__.py: `from .protocol import
DataProto`; verl/utils/__init__.py: the tokenizer helpers; verl/workers/config/model.py: transformers), none of which
the controller has. The modules holding verl's configuration dataclasses and checks import only omegaconf and each
other, so `verl_modules()` imports just those files, under their own names, with empty stand-ins for the package
__init__s and for verl/workers/config/model.py (HFModelConfig is only a type annotation of the actor's config; the
model config itself needs the model and a tokenizer); sys.modules is restored afterwards. What runs is verl's code:

- verl/utils/config.py validate_config: the start-up check of verl's main_ppo (verl/trainer/main_ppo.py); the DAPO
  recipe (verl v0.7.0 recipe/dapo/main_dapo.py) does not call it, but each of its checks guards something the DAPO run
  meets after the NPUs are allocated. It instantiates the actor's config (ActorConfig/FSDPActorConfig __post_init__
  and validate, with the optimizer's, the FSDP engine's, the checkpoint's and the profiler's __post_init__s).
- the rollout's config: omega_conf_to_dataclass(rollout) -> RolloutConfig.__post_init__ (and its sampling, trace,
  agent and server configs), as verl/workers/fsdp_workers.py _build_rollout does;
- the reference policy's FSDP config and the actor's profiler config, converted as verl/workers/fsdp_workers.py
  ActorRolloutRefWorker does (omega_conf_to_dataclass(ref.fsdp_config); (actor.profiler, ProfilerConfig)).

Each failure is one line: the verl key (found in the failing line of verl's source, or else in its message), verl's
message, and the file, line and function of verl that raised it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import io
import re
import sys
import traceback
import types
import warnings
from pathlib import Path
from typing import Callable, Iterator

from dapo_ops.job.composed import AR, read

# package __init__s that import torch, numpy, ray or transformers: stand-ins with the right __path__
PACKAGES = ("verl", "verl.utils", "verl.utils.profiler", "verl.trainer", "verl.workers", "verl.workers.config")
WORKER_CONFIGS = ("optimizer", "engine", "actor", "critic", "rollout")
FULL_KEY = re.compile(r"full_key: (\S+)")


def verl_root() -> Path | None:
    module = sys.modules.get("verl")
    if module is not None and module.__spec__ is None:   # the stand-in of verl_modules()
        return Path(module.__path__[0])
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _package(name: str, root: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def _stand_ins(root: Path) -> types.SimpleNamespace:
    for name in PACKAGES:
        _package(name, root)
    profiler = importlib.import_module("verl.utils.profiler.config")
    sys.modules["verl.utils.profiler"].ProfilerConfig = profiler.ProfilerConfig
    base = importlib.import_module("verl.base_config").BaseConfig
    model = types.ModuleType("verl.workers.config.model")
    model.HFModelConfig = dataclasses.make_dataclass("HFModelConfig", [], bases=(base,))
    sys.modules[model.__name__] = model
    trainer_config = importlib.import_module("verl.trainer.config")   # its __init__ imports only its own modules
    sys.modules["verl.trainer"].config = trainer_config
    configs = sys.modules["verl.workers.config"]
    for name in WORKER_CONFIGS:   # what verl/workers/config/__init__.py re-exports, less model and reward_model
        module = importlib.import_module(f"verl.workers.config.{name}")
        for attr in module.__all__:
            setattr(configs, attr, getattr(module, attr))
    return types.SimpleNamespace(config=importlib.import_module("verl.utils.config"),
                                 tracking=importlib.import_module("verl.utils.tracking"), profiler=profiler)


# (verl's root, the stand-in packages, the worker configs) -> the imported modules: a process imports them once
_IMPORTED: dict[tuple, tuple[types.SimpleNamespace, dict[str, types.ModuleType]]] = {}


def _imported(root: Path) -> types.SimpleNamespace:
    """verl's configuration modules from `root`, imported on the first call and put back into sys.modules after."""
    key = (root, PACKAGES, WORKER_CONFIGS)
    if key not in _IMPORTED:
        verl = _stand_ins(root)
        _IMPORTED[key] = verl, {k: v for k, v in sys.modules.items() if k == "verl" or k.startswith("verl.")}
    verl, modules = _IMPORTED[key]
    sys.modules.update(modules)
    return verl


@contextlib.contextmanager
def verl_modules() -> Iterator[types.SimpleNamespace | None]:
    """verl's configuration modules (None when verl is not installed), sys.modules restored on the way out."""
    root = verl_root()
    saved = {k: v for k, v in sys.modules.items() if k == "verl" or k.startswith("verl.")}
    for name in saved:
        del sys.modules[name]
    try:
        yield _imported(root) if root is not None else None
    finally:
        # a list first: sys.modules cannot change size while it is iterated; then what was there before comes back
        for name in [k for k in sys.modules if k == "verl" or k.startswith("verl.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def _causes(exc: BaseException) -> list[BaseException]:
    chain = [exc]
    while len(chain) < 16:
        last = chain[-1]
        nxt = last.__cause__ or (None if last.__suppress_context__ else last.__context__)
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
    return chain


def _verl_frame(exc: BaseException) -> tuple[traceback.FrameSummary, str] | None:
    """The last frame of the traceback in verl's own files, and that file as verl/<path>."""
    root = verl_root()
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename)
        if root is not None and path.is_relative_to(root):
            return frame, (Path("verl") / path.relative_to(root)).as_posix()
    return None


def _key(section: str, line: str, message: str, composed: dict) -> str:
    """The verl key a failure is about: `config.<key>` or `self.<field>` in verl's failing line, else a key of the
    section named in the message (the longest), else the section."""
    for dotted in re.findall(r"config\.([A-Za-z_][\w.]*\w)", line):
        if "." in dotted:   # validate_config's `config.actor_rollout_ref.rollout.temperature`
            return dotted
    fields = re.findall(r"self\.(\w+)", line)
    node = read(composed, section, {})
    if fields and isinstance(node, dict) and fields[0] in node:
        return f"{section}.{fields[0]}"
    named = [k for k in re.findall(r"[A-Za-z_][\w.]*\w", message) if read(composed, k, None) is not None and "." in k]
    if named:
        return max(named, key=len)
    leaves = [k for k in (node if isinstance(node, dict) else {}) if re.search(rf"\b{re.escape(k)}\b", message)]
    return f"{section}.{max(leaves, key=len)}" if leaves else section


def describe(exc: BaseException, section: str, composed: dict) -> str:
    """One line: the verl key, verl's message, and where in verl it was raised."""
    chain = _causes(exc)
    root = chain[-1]
    for link in chain:
        found = FULL_KEY.findall(str(link))
        section = found[-1] if found and read(composed, found[-1], None) is not None else section
    found_frame = _verl_frame(root)
    frame, path = found_frame if found_frame else (None, "")
    line = (frame.line or "") if frame else ""
    message = " ".join(str(root).split()) or (f"{line.strip()} failed" if line else type(root).__name__)
    where = f" ({path}:{frame.lineno} {frame.name}, verl's own check run offline)" if frame else ""
    return f"{_key(section, line, message, composed)}: {message}{where}"


def _run(check: Callable[[], object], section: str, composed: dict) -> list[str]:
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check()
    except Exception as exc:   # verl raises ValueError, AssertionError, NotImplementedError, hydra's wrappers...
        return [describe(exc, section, composed)]
    return []


def use_critic(composed: dict) -> bool:
    """verl/trainer/ppo/utils.py need_critic: critic.enable, else whether the advantage estimator is GAE."""
    enable = read(composed, "critic.enable")
    return bool(enable) if enable is not None else read(composed, "algorithm.adv_estimator") == "gae"


def use_reference_policy(composed: dict) -> bool:
    """recipe/dapo/main_dapo.py: a reference policy when the KL is in the reward or in the loss."""
    return bool(read(composed, "algorithm.use_kl_in_reward") or read(composed, f"{AR}.actor.use_kl_loss"))


def _checks(verl: types.SimpleNamespace, composed: dict) -> list[str]:
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(composed)
    to_dataclass = verl.config.omega_conf_to_dataclass
    problems = _run(lambda: verl.config.validate_config(cfg, use_reference_policy=use_reference_policy(composed),
                                                        use_critic=use_critic(composed)), f"{AR}.actor", composed)
    for section in (f"{AR}.rollout", f"{AR}.ref.fsdp_config"):
        problems += _run(lambda: to_dataclass(OmegaConf.select(cfg, section)), section, composed)
    profiler = f"{AR}.actor.profiler"
    problems += _run(lambda: to_dataclass(OmegaConf.select(cfg, profiler) or {}, verl.profiler.ProfilerConfig),
                     profiler, composed)
    return list(dict.fromkeys(problems))


def run_verl_checks(composed: dict) -> tuple[list[str], list[str] | None]:
    """verl's own checks on the composed configuration: the problems, and the logger names verl's Tracking accepts
    (verl/utils/tracking.py Tracking.supported_backend; None when verl is not installed)."""
    try:
        with verl_modules() as verl:
            if verl is None:
                return [], None
            return _checks(verl, composed), list(verl.tracking.Tracking.supported_backend)
    except (ImportError, AttributeError) as exc:   # a verl whose config modules import differently
        return [f"verl's own checks cannot run offline from the installed verl ({verl_root()}): {exc}"], None
