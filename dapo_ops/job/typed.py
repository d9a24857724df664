"""Building a typed model (frozen dataclasses) from the data of a user's YAML: each field converted by its type
hint, unknown fields and wrong types refused with the field named (pure). dapo_ops/job/spec.py declares the model."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from dapo_ops.errors import UsageError
from dapo_ops.job import strings
from dapo_ops.yaml_numbers import NumberText


class SpecError(UsageError):
    """The job spec is invalid; the message names the field and the fix (and `at`, the line and column in the file,
    where the problem is a value as written)."""

    def __init__(self, message: str, at: tuple[int, int] | None = None):
        super().__init__(message)
        self.at = at


def _as_written(value: NumberText, where: str) -> SpecError:
    return SpecError(f"{where}: {value.problem}", (value.line, value.column))


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{where}: expected true or false, got {value!r}")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, NumberText):
        raise _as_written(value, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: expected a whole number, got {value!r}")
    return value


def _float(value: Any, where: str) -> float:
    """Any float as YAML writes it (`0.90`, `5e-7`, `1.0e-6`): a text kept as written matters only for text."""
    if isinstance(value, NumberText):
        number = value.as_float()
        if number is None:
            raise _as_written(value, where)
        return number
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _str(value: Any, where: str) -> str:
    if isinstance(value, NumberText):
        raise _as_written(value, where)
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise SpecError(f"{where}: expected a string, got {value!r}")
    problem = strings.text_problem(str(value))
    if problem:
        raise SpecError(f"{where}: {problem}")
    return str(value)


_SCALARS = {bool: _bool, int: _int, float: _float, str: _str}


def _optional(value: Any, hint: Any, where: str) -> Any:
    if value is None:
        if type(None) in typing.get_args(hint):
            return None
        raise SpecError(f"{where}: must not be empty")
    options = [a for a in typing.get_args(hint) if a is not type(None)]
    listed = [a for a in options if typing.get_origin(a) is tuple]
    return _convert(value, listed[0] if isinstance(value, list) and listed else options[0], where)


def _tuple(value: Any, hint: Any, where: str) -> tuple:
    if not isinstance(value, list):
        raise SpecError(f"{where}: expected a list, got {type(value).__name__}")
    return tuple(_convert(v, typing.get_args(hint)[0], f"{where}[{i}]") for i, v in enumerate(value))


def _mapping(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a mapping, got {type(value).__name__}")
    return {str(k): str(_convert(v, str | int | float, f"{where}.{k}")) for k, v in value.items()}


def _convert(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return _optional(value, hint, where)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)
    if origin is tuple:
        return _tuple(value, hint, where)
    if origin is dict:
        return _mapping(value, where)
    check = _SCALARS.get(hint)
    return check(value, where) if check else value


def build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise SpecError(f"{where or 'the spec'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in data if k not in fields]
    if unknown:
        known = ", ".join(fields)
        raise SpecError(f"{where + '.' if where else ''}{unknown[0]}: unknown field (known here: {known})")
    kwargs = {}
    for name, f in fields.items():
        path = f"{where}.{name}" if where else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"{path}: required field is missing")
            continue
        kwargs[name] = _convert(data[name], hints[name], path)
    return cls(**kwargs)
