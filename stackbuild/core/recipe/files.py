"""The files a recipe names, read: the recipe's YAML, the config snapshots, the patch series' lock.

Each reader turns what can go wrong with its file into one RecipeError naming the recipe and the key.
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path
from typing import Any, Mapping

import yaml

from overlay.errors import OverlayError
from overlay.lock import read_lock as read_series_lock_file
from stackbuild.core.errors import RecipeError
from stackbuild.core.recipe.values import REPO_ROOT
from stackbuild.core.schema import MAX_INTEGER

MAX_CONFIG_BYTES = 16 << 20


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges, it does not repeat
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader reports it
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """The recipe file's YAML (None for an empty file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(path, "", "recipe file not found") from None
    except IsADirectoryError:
        raise RecipeError(path, "", "is a directory, not a recipe file") from None
    except UnicodeDecodeError:
        raise RecipeError(path, "", "not UTF-8 text") from None
    except OSError as exc:
        raise RecipeError(path, "", f"cannot read recipe: {exc.strerror}") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(path, "", f"invalid YAML{where}: {problem}") from None
    except (ValueError, RecursionError) as exc:  # an integer too long to convert, nesting too deep
        raise RecipeError(path, "", f"invalid YAML: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None


def _json_object(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _json_int(text: str) -> int:
    if len(text) > 17 or abs(int(text)) > MAX_INTEGER:
        raise ValueError(f"integer {text[:20]}{'...' if len(text) > 20 else ''} is too large")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def config_path(recipe_path: Path, key: str, relative: str) -> Path:
    """The file a recipe's config key names: a relative path that stays inside the recipe's directory."""
    if not relative.strip():
        raise RecipeError(recipe_path, key, "empty path")
    if "\x00" in relative:
        raise RecipeError(recipe_path, key, f"{relative!r} holds a NUL character")
    if os.path.isabs(relative):
        raise RecipeError(recipe_path, key, f"must be relative to the recipe's directory, got {relative!r}")
    root = recipe_path.parent.resolve()
    try:
        resolved = (root / relative).resolve(strict=False)
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        raise RecipeError(recipe_path, key, f"{relative}: symlink loop") from None
    if resolved != root and root not in resolved.parents:
        raise RecipeError(recipe_path, key, f"{relative} leaves the recipe's directory {root}")
    return resolved


def read_config(recipe_path: Path, key: str, relative: str) -> Mapping[str, Any]:
    """The config.json a recipe's key names: one JSON object, without repeated keys, NaN or integers
    beyond what every JSON reader holds exactly."""
    path = config_path(recipe_path, key, relative)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise RecipeError(recipe_path, key, f"file not found: {relative}") from None
    except IsADirectoryError:
        raise RecipeError(recipe_path, key, f"{relative} is a directory, not a config.json") from None
    except OSError as exc:
        why = "symlink loop" if exc.errno == errno.ELOOP else exc.strerror
        raise RecipeError(recipe_path, key, f"cannot read {relative}: {why}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise RecipeError(
            recipe_path, key, f"{relative} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a config.json"
        )
    if not raw.strip():
        raise RecipeError(recipe_path, key, f"{relative} is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecipeError(recipe_path, key, f"{relative} is not UTF-8 text (a binary file?)") from None
    try:
        data = json.loads(
            text,
            object_pairs_hook=_json_object,
            parse_constant=_json_constant,
            parse_int=_json_int,
            parse_float=_json_float,
        )
    except json.JSONDecodeError as exc:
        raise RecipeError(recipe_path, key, f"{relative} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise RecipeError(recipe_path, key, f"{relative}: {exc}") from None
    if not isinstance(data, dict):
        raise RecipeError(recipe_path, key, f"{relative} must hold a JSON object")
    return data


def read_series_lock(recipe_path: Path, series_dir: Path) -> Mapping[str, Any]:
    """The patch series' lock.json (overlay/lock.py reads it), its faults named under overlay.series."""
    try:
        return read_series_lock_file(series_dir)
    except OverlayError as exc:
        raise RecipeError(recipe_path, "overlay.series", str(exc).replace(str(REPO_ROOT) + os.sep, "")) from None
