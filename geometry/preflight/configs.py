"""Read a mounted checkpoint's config.json for the pre-flight (stdlib only)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

from geometry.image_contract import Role


class ConfigUnusable(Exception):
    """A config.json the argv points at is missing, unreadable or not a JSON object."""


@dataclass(frozen=True)
class MountedConfig:
    role: Role
    path: str  # where it was read (on the host: under --models-dir)
    sha256: str
    data: Mapping[str, Any]


def read_config(role: Role, model_dir: str, shown_as: str) -> MountedConfig:
    """``model_dir``/config.json; ``shown_as`` is the model path the argv names (for messages)."""
    path = os.path.join(model_dir, "config.json")
    where = f"the {role} config {path}" + (f" (argv: {shown_as})" if not path.startswith(shown_as) else "")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise ConfigUnusable(f"{where} does not exist: is the checkpoint mounted there?") from None
    except IsADirectoryError:
        raise ConfigUnusable(f"{where} is a directory, not a file") from None
    except OSError as exc:
        raise ConfigUnusable(f"{where} cannot be read: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise ConfigUnusable(f"{where} is not JSON (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise ConfigUnusable(f"{where} is not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise ConfigUnusable(f"{where} holds JSON but not an object")
    return MountedConfig(role, path, hashlib.sha256(raw).hexdigest(), data)
