"""Checks that a JSON document has the shape its writer writes, each failure one line naming the
place and the key (stdlib only). The overlay manifest and geometry/image_contract.py's documents
use them, each with its own error type (``error``)."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, Mapping


def read_json(error: type[Exception], path: str) -> Any:
    """The JSON document at ``path``; ``error`` with "PATH: unreadable: ..." when it cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        raise error(f"{path}: unreadable: {exc}") from None


def json_object(error: type[Exception], data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise error(f"{where}: expected a JSON object, got {type(data).__name__}")
    return data


def exact_keys(
    error: type[Exception], data: Mapping[str, Any], cls: type, where: str, optional: tuple[str, ...] = ()
) -> None:
    """``data`` has the fields of dataclass ``cls``, no others (``optional`` may be absent)."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise error(f"{where}: unknown key {unknown[0]!r}")
    missing = sorted(names - set(data) - set(optional))
    if missing:
        raise error(f"{where}: missing key {missing[0]!r}")


def typed(error: type[Exception], data: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = data[key]
    if not isinstance(value, kind):
        raise error(f"{where}: {key}: unexpected {type(value).__name__} {value!r}")
    return value


def strings(error: type[Exception], data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = typed(error, data, key, list, where)
    if not all(isinstance(v, str) for v in value):
        raise error(f"{where}: {key}: expected a list of strings")
    return tuple(value)
