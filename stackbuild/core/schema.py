"""Turn parsed YAML into frozen dataclasses, naming the key path at fault.

A small typed walker rather than a schema library: the messages are the
product here (``<file>: <key path>: <why>``), and the dataclasses stay the
single description of what a recipe holds.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from stackbuild.core.errors import RecipeError

T = TypeVar("T")

# The largest integer a recipe may hold (2**53: every JSON reader represents it exactly);
# keys with a tighter range check it in the recipe's rules.
MAX_INTEGER = 1 << 53

_TYPE_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def convert(source: object, path: str, hint: Any, value: Any) -> Any:
    """Check ``value`` against the type ``hint`` and return the typed value."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None and type(None) in options:
            return None
        inner = [o for o in options if o is not type(None)]
        if len(inner) == 1:
            return convert(source, path, inner[0], value)
        raise TypeError(f"unsupported union {hint}")  # pragma: no cover - schema bug
    if origin is Literal:
        choices = get_args(hint)
        if value not in choices:
            allowed = ", ".join(str(c) for c in choices)
            raise RecipeError(source, path, f"must be one of: {allowed}; got {_describe(value)}")
        return value
    if dataclasses.is_dataclass(hint):
        return build_dataclass(source, path, hint, value)
    if origin is tuple:
        (item_hint, _ellipsis) = get_args(hint)
        if not isinstance(value, list):
            raise RecipeError(source, path, f"expected a list, got {_describe(value)}")
        return tuple(convert(source, f"{path}[{i}]", item_hint, v) for i, v in enumerate(value))
    if origin in (dict, Mapping, typing.Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise RecipeError(source, path, f"expected a mapping, got {_describe(value)}")
        key_hint, value_hint = get_args(hint) or (str, Any)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise RecipeError(source, path, f"keys must be strings, got {_describe(k)}")
            out[k] = v if value_hint is Any else convert(source, _join(path, k), value_hint, v)
        return types.MappingProxyType(out)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecipeError(source, path, f"expected a number, got {_describe(value)}")
        if abs(value) > MAX_INTEGER or not math.isfinite(value):
            raise RecipeError(
                source, path, f"expected a finite number of at most {MAX_INTEGER:,}, got {_describe(value)}"
            )
        return float(value)
    if hint in (str, int, bool):
        # bool is an int in Python; a recipe's `true` is never a count.
        if type(value) is not hint:
            raise RecipeError(source, path, f"expected {_TYPE_WORDS[hint]}, got {_describe(value)}")
        if hint is int and abs(value) > MAX_INTEGER:
            raise RecipeError(source, path, f"must be at most {MAX_INTEGER:,} in magnitude, got {value:,}")
        return value
    raise TypeError(f"unsupported type {hint}")  # pragma: no cover - schema bug


def build_dataclass(source: object, path: str, cls: type[T], value: Any) -> T:
    """Build ``cls`` from a mapping: unknown keys, missing keys and types are checked."""
    if not isinstance(value, Mapping):
        raise RecipeError(source, path or "(top level)", f"expected a mapping, got {_describe(value)}")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")}
    for key in value:
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise RecipeError(source, _join(path, str(key)), f"unknown key (expected one of: {known})")
    kwargs = {}
    for name, field in fields.items():
        key_path = _join(path, name)
        if name not in value:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise RecipeError(source, key_path, "required key is missing")
            continue
        kwargs[name] = convert(source, key_path, hints[name], value[name])
    return cls(**kwargs)
