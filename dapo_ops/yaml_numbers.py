"""The number rule of the YAML dapo-ops reads from users (pure): which plain scalars are numbers, and the text of
those that a number would not keep (dapo_ops/userfile.py explains the rule; dapo_ops/job/spec.py applies it by the
field's type)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import yaml

MAX_NUMBER_CHARS = 100       # longer number-like scalars are refused (Python refuses ints over 4300 digits)
# what is read as a number: decimal integers, decimal floats without a trailing zero (but a lone .0), inf/nan
_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(?:(?:0|[1-9][0-9]*)(?:\.(?:[0-9]*[1-9]|0)?)?|\.(?:[0-9]*[1-9]|0))(?:[eE][-+]?[0-9]+)?")
_SPECIAL = re.compile(r"[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
# numbers in the YAML 1.2 core schema (YAML 1.1's are those PyYAML's own resolver finds)
_CORE_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_CORE_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_YAML11 = yaml.resolver.Resolver()
_YAML11_NUMBERS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


@dataclass(frozen=True)
class NumberText:
    """A plain scalar that looks like a number whose text a number would not keep (`0.90`, `2024.10`, `010`)."""

    text: str
    line: int        # 1-based, where the scalar starts
    column: int

    def __str__(self) -> str:
        return self.text

    @property
    def problem(self) -> str:
        """Why it is not a text or an integer as written."""
        return _not_as_written(self.text)

    def as_float(self) -> float | None:
        """The float every YAML reader makes of it (1.2's core schema, and 1.1's where 1.1 reads a number), finite
        and not underflown to zero; None when readers differ (`010`: 8 or 10) or 1.2 reads no float (`1_000`)."""
        if not _CORE_FLOAT.fullmatch(self.text):
            return None
        value = float(self.text)
        yaml11 = _as_yaml11(self.text)
        underflown = value == 0 and re.search(r"[1-9]", re.split(r"[eE]", self.text)[0]) is not None
        if not math.isfinite(value) or underflown:
            return None
        if yaml11 is not None and float(yaml11) != value:
            return None
        return value


def looks_like_number(text: str) -> bool:
    return (_CORE_INT.fullmatch(text) is not None or _CORE_FLOAT.fullmatch(text) is not None
            or _SPECIAL.fullmatch(text) is not None
            or _YAML11.resolve(yaml.ScalarNode, text, (True, False)) in _YAML11_NUMBERS)


def read_number(text: str) -> tuple[Any, str | None]:
    """(the number, None) when the text is read as one without losing a written digit, else (None, why not)."""
    if len(text) > MAX_NUMBER_CHARS:
        return None, f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS}): quote it if it is text"
    if _INT.fullmatch(text):
        return int(text), None
    if _SPECIAL.fullmatch(text):
        return float(text.replace(".", "")), None
    if _FLOAT.fullmatch(text) and _exact_float(text):
        return float(text), None
    return None, _not_as_written(text)


def _not_as_written(text: str) -> str:
    readings = " or ".join(dict.fromkeys(repr(v) for v in (_as_yaml11(text), _as_yaml12(text)) if v is not None))
    return (f"{text} would be read as the number {readings or '?'}, not as written: quote it (\"{text}\") "
            f"to keep the text, or write the number plainly")


def _exact_float(text: str) -> bool:
    """Whether float(text) is the decimal written: finite, not rounded (beyond the shortest repr), not underflown."""
    value = float(text)
    try:
        return math.isfinite(value) and Decimal(text) == Decimal(repr(value))
    except ArithmeticError:   # an exponent beyond what Decimal holds: not a float either
        return False


def _as_yaml11(text: str) -> Any:
    """What PyYAML (YAML 1.1) makes of a number-like plain scalar, when a number."""
    value = yaml.safe_load(text)     # the text is a short number-like scalar: nothing else to parse
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _as_yaml12(text: str) -> Any:
    """What a YAML 1.2 (core schema) reader makes of it, when a number."""
    if _CORE_INT.fullmatch(text):
        return int(text, 0) if text[:2] in ("0o", "0x") else int(text)
    return float(text) if _CORE_FLOAT.fullmatch(text) else None
