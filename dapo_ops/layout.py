"""The node layout the provisioning roles use (roles/stack/defaults/main.yml), read by the Python side too."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import jinja2
import yaml

from dapo_ops.errors import ManifestError
from dapo_ops.paths import PROJECT_ROOT

STACK_DEFAULTS = PROJECT_ROOT / "roles" / "stack" / "defaults" / "main.yml"


@lru_cache(maxsize=1)
def _raw_defaults() -> dict:
    try:
        return yaml.safe_load(STACK_DEFAULTS.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ManifestError(f"cannot read {STACK_DEFAULTS}: {exc}") from None


@dataclass(frozen=True)
class NodeLayout:
    """Where the stack lives on one node; `values` holds every stack_* default, resolved."""

    values: dict[str, str]

    def __getitem__(self, key: str) -> str:
        return self.values[key]

    @property
    def python(self) -> str:
        return self.values["stack_env_python"]

    @property
    def pip(self) -> str:
        return self.values["stack_env_pip"]

    @property
    def ray(self) -> str:
        return self.values["stack_env_ray"]

    @property
    def env_script(self) -> str:
        return self.values["stack_env_script"]

    @property
    def src_root(self) -> str:
        return self.values["stack_src_root"]


def node_layout(host_vars: dict | None = None) -> NodeLayout:
    """stack_* paths for one host: its inventory variables where it sets them, else the role defaults, with the
    defaults' references to each other resolved (e.g. stack_env_prefix follows an overridden stack_conda_prefix)."""
    raw = dict(_raw_defaults())
    for key, value in (host_vars or {}).items():
        if key in raw and isinstance(value, str):
            raw[key] = value
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    values: dict[str, str] = {}
    for _ in range(len(raw)):
        for key, value in raw.items():
            if key in values or "role_path" in str(value):
                continue
            try:
                values[key] = env.from_string(str(value)).render(**values)
            except jinja2.UndefinedError:
                continue
    return NodeLayout(values)
