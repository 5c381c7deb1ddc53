"""The qualify result file: its one writer (qualify.json under --out) and its one reader (--baseline-result),
both of result.Qualification. The reader rebuilds every field from its annotation, so a file that is not a
result of this schema names the key at fault."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from pathlib import Path
from typing import Any

from stackbuild.core.errors import QualifyResultInvalid
from stackbuild.serve.qualify.result import SCHEMA, Qualification

# Keys --json adds beside the record's fields: derived (passed) or about the image (attached); read past.
DERIVED_KEYS = frozenset({"passed", "attached"})


class _Invalid(ValueError):
    """One key of the document is not as the definition says (the key path, then why)."""


def write(result: Qualification, path: Path) -> Path:
    """``result`` as JSON at ``path`` (replaced atomically)."""
    from stackbuild.core.atomic import replace_text

    replace_text(path, json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    return path


def read(path: Path, option: str = "--baseline-result") -> Qualification:
    """The result a file holds; QualifyResultInvalid naming ``option``, the file and the key at fault."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise QualifyResultInvalid(f"{option} {path}: unreadable ({why})") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise QualifyResultInvalid(f"{option} {path}: not JSON (line {getattr(exc, 'lineno', '?')})") from None
    try:
        return from_json(data)
    except _Invalid as exc:
        raise QualifyResultInvalid(f"{option} {path}: {exc}: not a qualify result of schema {SCHEMA}") from None


def from_json(data: Any) -> Qualification:
    """The Qualification ``data`` (parsed JSON) holds; _Invalid naming the first key that is not as written."""
    if not isinstance(data, dict):
        raise _Invalid("(top level): not a JSON object")
    if data.get("schema") != SCHEMA:
        raise _Invalid(f"schema: {data.get('schema')!r}, expected {SCHEMA!r}")
    known = {f.name for f in dataclasses.fields(Qualification)} | DERIVED_KEYS
    extra = sorted(k for k in data if k not in known)
    if extra:
        raise _Invalid(f"{extra[0]}: not a key of the result")
    return _dataclass(Qualification, data, "")


def _dataclass(cls: type, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise _Invalid(f"{path or '(top level)'}: not a JSON object")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        key = f"{path}.{f.name}" if path else f.name
        if f.name not in data:
            raise _Invalid(f"{key}: missing")
        values[f.name] = _value(hints[f.name], data[f.name], key)
    return cls(**values)


def _value(kind: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        others = [o for o in options if o is not type(None)]
        if len(others) == 1:  # Optional[X]: X's own reason, with its key path
            return _value(others[0], value, key)
        for option in others:
            try:
                return _value(option, value, key)
            except _Invalid as exc:
                if isinstance(value, list) and typing.get_origin(option) is tuple:
                    raise exc from None  # a list where a list may go: the item at fault, with its index
        raise _Invalid(f"{key}: not {' or '.join(_name(o) for o in options)}")
    if origin is tuple:
        (item, _ellipsis) = typing.get_args(kind)
        if not isinstance(value, list):
            raise _Invalid(f"{key}: not a list")
        return tuple(_value(item, v, f"{key}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(kind):
        return _dataclass(kind, value, key)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        try:
            return kind(value)
        except ValueError:
            raise _Invalid(f"{key}: {value!r}, expected one of {', '.join(repr(m.value) for m in kind)}") from None
    if kind is bool:
        if not isinstance(value, bool):
            raise _Invalid(f"{key}: not true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"{key}: not an integer")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _Invalid(f"{key}: not a number")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise _Invalid(f"{key}: not a string")
        return value
    raise TypeError(f"{key}: the result's definition has a field of a kind the reader does not know: {kind!r}")


def _name(kind: Any) -> str:
    if typing.get_origin(kind) is tuple:
        return "a list"
    if kind is type(None):
        return "null"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        kind, getattr(kind, "__name__", str(kind))
    )
