"""The node layout the provisioning roles use (roles/stack/defaults/main.yml), read by the Python side too."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

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


# A reference to another variable, the one template form the layout resolves (the roles' defaults use no other).
_REFERENCE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_TEMPLATE = re.compile(r"\{\{|\{%|\{#")


def layout_problems(host_vars: dict) -> list[str]:
    """What is wrong with a host's stack_* inventory values (pure): they are data, so a template beyond a plain
    `{{ stack_variable }}` reference is refused (never evaluated), and every path must be absolute and printable."""
    problems = []
    defaults = _raw_defaults()
    for key, value in sorted((host_vars or {}).items()):
        if key not in defaults or not isinstance(value, str):
            continue
        if _TEMPLATE.search(_REFERENCE.sub("", value)):
            problems.append(f"{key}: {value!r} is a template; only {{{{ stack_... }}}} references are allowed")
        elif any(ord(c) < 32 or ord(c) == 127 for c in value):
            problems.append(f"{key}: {value!r} contains a control character")
        elif any(m.group(1) not in defaults for m in _REFERENCE.finditer(value)):
            problems.append(f"{key}: {value!r} refers to a variable that is not a stack_* setting")
        elif isinstance(defaults[key], str) and defaults[key].startswith(("/", "{{ stack_")) and \
                not _REFERENCE.sub("/x", value).startswith("/"):
            problems.append(f"{key}: {value!r} is not an absolute path")
    return problems


def _resolve(raw: dict) -> dict[str, str]:
    """Substitute `{{ name }}` references among the values, nothing else (a value with any other template, such as
    a default's `| default(...)`, is left out: the Python side needs none of those)."""
    values: dict[str, str] = {}
    for _ in range(len(raw)):
        for key, value in raw.items():
            text = str(value)
            if key in values or _TEMPLATE.search(_REFERENCE.sub("", text)):
                continue
            names = [m.group(1) for m in _REFERENCE.finditer(text)]
            if all(name in values for name in names):
                values[key] = _REFERENCE.sub(lambda m: values[m.group(1)], text)
    return values


def node_layout(host_vars: dict | None = None) -> NodeLayout:
    """stack_* paths for one host: its inventory variables where it sets them, else the role defaults, with the
    references between them resolved (e.g. stack_env_prefix follows an overridden stack_conda_prefix). Inventory
    values are data: checked by layout_problems when the inventory is read, and never evaluated as templates."""
    raw = dict(_raw_defaults())
    for key, value in (host_vars or {}).items():
        if key in raw and isinstance(value, str):
            raw[key] = value
    return NodeLayout(_resolve(raw))
