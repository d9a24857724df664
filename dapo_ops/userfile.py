"""Reading files a user wrote or handed us (job specs, audit bundles): bounded, UTF-8, one-line errors.

Pure but for reading the file. Every refusal is a UserFileError (a UsageError: exit code 2) of one line,
`{what} {path}:{line}:{col}: {problem}` (`{what} {path}: {problem}` when there is no position).

YAML (load_yaml, parse_yaml) is read with PyYAML's pure-Python SafeLoader, narrowed:

- at most MAX_YAML_BYTES (1 MiB), checked before the file is read whole; UTF-8 only (the error names the byte
  offset of the first bad byte);
- no anchors, aliases or tags (`&a`, `*a`, `!!str`): a job spec needs none, and an alias bomb is refused at its
  first anchor, before anything is expanded;
- at most MAX_DEPTH (32) nested collections, refused where the 33rd opens (no recursion blow-up);
- a key may appear once per mapping (the error names the key and both lines); keys are plain values;
- plain (unquoted) scalars follow the YAML 1.2 core schema: `true`/`false` (also `True`, `TRUE`, ...) are the
  only booleans (`yes`, `no`, `on`, `off` are strings), `null`/`~`/empty is null, dates are strings, and
  `1e-6`, `1E5`, `.5`, `1.0e-06` are floats (YAML 1.1 would leave `1e-6` a string).

The number rule: an unquoted scalar that any YAML reader (1.1 or 1.2) would take as a number is read as one only
if no written digit is lost, that is, it is a plain decimal integer (`-1`, `4096`; no leading zero, no `_`) or a
decimal float whose value is exactly the decimal written (no rounding, no overflow to inf, no underflow to 0)
and with no trailing zero after the point except a lone `.0` (`0.8`, `1.0`, `1e-6`, `.inf`). Any other
number-like scalar (`2024.10`, `0.50`, `1_000`, `0o17`, `0x1F`, `010`, `1e400`, `12:30`) is read as a NumberText
(its text, its position, what it would have been read as): whoever reads the document knows the field's type and
decides. A float field takes a NumberText that every YAML reader reads as the same finite float (`0.90`, `5e-7`,
`1.0e-6`, `2024.10`: `as_float`); a text or integer field refuses it with `problem`, naming what it would have
been read as (quote it to keep the text: `experiment_name: "2024.10"`, or write the number plainly).
Number-like scalars over MAX_NUMBER_CHARS (100) characters are refused at once.

JSON (load_json, parse_json): the same size limit and UTF-8 rule, duplicate keys and nesting past MAX_DEPTH refused.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from dapo_ops.errors import UsageError
from dapo_ops.yaml_numbers import MAX_NUMBER_CHARS, NumberText, looks_like_number, read_number

MAX_YAML_BYTES = 1 << 20     # 1 MiB: a job spec is a few KB
MAX_JSON_BYTES = 1 << 20
MAX_DEPTH = 32               # nested mappings/sequences; a job spec uses 3

NUMBER_TAG = "tag:dapo-ops,2025:number"   # a plain scalar that looks like a number: read_number decides
_NULLS = {"", "~", "null", "Null", "NULL"}
_BOOLS = {"true", "True", "TRUE", "false", "False", "FALSE"}   # PyYAML's bool constructor reads these


class UserFileError(UsageError):
    """A user's file cannot be read as asked; the message is one line naming the file (and line:col)."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.splitlines()))


# ------------------------------------------------------------------------------------------------ bytes, text


def read_bytes(path: Path | str, what: str, limit: int) -> bytes:
    """The file's bytes, refused unread past `limit` (its size is checked first, and at most limit + 1 bytes are
    read, so a device or a growing file cannot make us read more)."""
    path = Path(path)
    try:
        with open(path, "rb") as stream:
            size = _size(stream)
            data = stream.read(limit + 1) if size <= limit else b""
    except OSError as exc:
        raise UserFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if size > limit or len(data) > limit:
        shown = f"{size} bytes, over" if size > limit else "over"
        raise UserFileError(f"{what} {path}: {shown} the {_human(limit)} limit; not read")
    return data


def _size(stream) -> int:
    """A regular file's size; 0 for a pipe or a device (read_bytes reads those bounded)."""
    info = os.fstat(stream.fileno())
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def _human(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"


def decode_utf8(data: bytes, source: Path | str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start
        line_start = data.rfind(b"\n", 0, start) + 1
        line, col = data.count(b"\n", 0, start) + 1, len(data[line_start:start].decode("utf-8")) + 1
        raise UserFileError(f"{what} {source}:{line}:{col}: not UTF-8: byte 0x{data[start]:02X} at byte offset "
                            f"{start} cannot be decoded (save the file as UTF-8)") from None


def read_text(path: Path | str, what: str, limit: int) -> str:
    return decode_utf8(read_bytes(path, what, limit), path, what)


# ----------------------------------------------------------------------------------------------------- YAML


def _refuse(problem: str, mark) -> ConstructorError:
    return ConstructorError(None, None, problem, mark)


class _Loader(yaml.SafeLoader):
    """SafeLoader without anchors, aliases or tags, depth-limited, resolving plain scalars by the YAML 1.2 core
    schema (the number rule in the module docstring)."""

    yaml_implicit_resolvers: dict = {}    # plain scalars: resolve() below

    def __init__(self, stream: str):
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _refuse(f"alias *{event.anchor}: anchors and aliases are not allowed (write the value out)",
                          event.start_mark)
        if event.anchor is not None:
            raise _refuse(f"anchor &{event.anchor}: anchors and aliases are not allowed (write the value out)",
                          event.start_mark)
        if event.tag is not None:
            tag = event.tag.replace("tag:yaml.org,2002:", "!!")
            raise _refuse(f"tag {tag}: tags are not allowed (quote a value to make it a string)", event.start_mark)
        if not isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            return super().compose_node(parent, index)
        if self.depth >= MAX_DEPTH:
            raise _refuse(f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def resolve(self, kind, value, implicit):
        if kind is yaml.ScalarNode and implicit[0]:
            return plain_tag(value)
        return super().resolve(kind, value, implicit)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _refuse("a key must be a plain value, not a list or mapping", key_node.start_mark)
            key = self.construct_object(key_node)
            if key in seen:
                raise _refuse(f"duplicate key {key!r} (first at line {seen[key].line + 1}, again at line "
                              f"{key_node.start_mark.line + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)

    def construct_number(self, node):
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _refuse(f"a number of {len(node.value)} characters (at most {MAX_NUMBER_CHARS}): quote it if it "
                          "is text", node.start_mark)
        value, problem = read_number(node.value)
        if problem:
            return NumberText(node.value, node.start_mark.line + 1, node.start_mark.column + 1)
        return value


_Loader.add_constructor(NUMBER_TAG, _Loader.construct_number)


def plain_tag(value: str) -> str:
    """The tag of a plain scalar: null, bool, number-like (NUMBER_TAG) or str."""
    if value in _NULLS:
        return "tag:yaml.org,2002:null"
    if value in _BOOLS:
        return "tag:yaml.org,2002:bool"
    if looks_like_number(value):
        return NUMBER_TAG
    return "tag:yaml.org,2002:str"


def parse_yaml(text: str, source: Path | str, what: str = "YAML file") -> Any:
    """The one document in `text`, read by the rules above."""
    try:
        loader = _Loader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        raise UserFileError(f"{what} {source}:{_marked(exc)}") from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - text.rfind("\n", 0, exc.position)
        raise UserFileError(f"{what} {source}:{line}:{col}: unacceptable character #x{exc.character:04x}: "
                            f"{exc.reason}") from None


def _marked(exc: yaml.MarkedYAMLError) -> str:
    """`line:col: problem (context at line:col)`, the problem's position first: PyYAML's message on one line."""
    mark = exc.problem_mark or exc.context_mark
    where = f"{mark.line + 1}:{mark.column + 1}: " if mark is not None else " "
    text = exc.problem or exc.context or "invalid YAML"
    if exc.problem and exc.context:
        context_mark = exc.context_mark
        at = (f" at {context_mark.line + 1}:{context_mark.column + 1}"
              if context_mark is not None and context_mark is not mark else "")
        text += f" ({exc.context}{at})"
    if exc.note:
        text += f" ({exc.note})"
    return where + text


def load_yaml(path: Path | str, what: str = "YAML file", limit: int = MAX_YAML_BYTES) -> Any:
    """Read a user's YAML file by the rules in the module docstring."""
    return parse_yaml(read_text(path, what, limit), path, what)


# ----------------------------------------------------------------------------------------------------- JSON


class _DuplicateKey(Exception):
    pass


def _unique_object(pairs: list[tuple[str, Any]]) -> dict:
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(key)
        found[key] = value
    return found


def _depth(value: Any) -> int:
    """How deeply lists and objects nest (iteratively: no recursion)."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level + 1)
            todo += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest


def parse_json(text: str, source: Path | str, what: str = "JSON file") -> Any:
    """One JSON document: duplicate keys and nesting deeper than MAX_DEPTH refused."""
    try:
        value = json.loads(text, object_pairs_hook=_unique_object)
    except json.JSONDecodeError as exc:
        raise UserFileError(f"{what} {source}:{exc.lineno}:{exc.colno}: {exc.msg}") from None
    except _DuplicateKey as exc:
        raise UserFileError(f"{what} {source}: duplicate key {exc.args[0]!r}") from None
    except RecursionError:
        raise UserFileError(f"{what} {source}: nested deeper than {MAX_DEPTH} levels") from None
    if _depth(value) > MAX_DEPTH:
        raise UserFileError(f"{what} {source}: nested deeper than {MAX_DEPTH} levels")
    return value


def load_json(path: Path | str, what: str = "JSON file", limit: int = MAX_JSON_BYTES) -> Any:
    return parse_json(read_text(path, what, limit), path, what)
