"""Inventory values as Ansible reads them (pure)."""

from __future__ import annotations

from dapo_ops.errors import InventoryError

_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0", ""}


def ansible_bool(value: object, name: str, default: bool, where: str = "") -> bool:
    """A boolean as Ansible reads one (YAML true/false, INI's strings); InventoryError naming the variable (and the
    host, `where`) for anything else."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise InventoryError(f"{where + ': ' if where else ''}{name} must be true or false (got {value!r})")
