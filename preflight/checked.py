"""What the build checked, recorded in the image for the pre-flight (stdlib only).

One typed definition: the build writes it (``write``, from the recipe), the
pre-flight reads it (``load``). The fast path compares the container's argv and
the mounted configs' sha256 with it; the slow path takes from its gate input
what no serve flag says (GPU family, memory for the KV cache).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Optional

SCHEMA = "glm53-preflight-checked/1"
FILE_NAME = "preflight-checked.json"  # next to the payload's geometry/ and preflight/


class CheckedUnreadable(ValueError):
    """The record of what the build checked is missing or malformed."""


@dataclass(frozen=True)
class CheckedModel:
    """One checkpoint as the build saw it: where the argv mounts it and its config snapshot."""

    id: str
    path: str  # the directory the argv names, inside the container
    revision: Optional[str]  # the checkpoint commit the recipe pins (None: not pinned)
    config_sha256: str  # sha256 of the config.json snapshot the gate checked


@dataclass(frozen=True)
class CheckedServe:
    recipe: str
    argv: tuple[str, ...]  # after `vllm serve`: the compose command
    target: CheckedModel
    drafter: CheckedModel
    gate_input: Mapping[str, Any]  # the GeometryInputs JSON the build's gate passed

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA,
            "recipe": self.recipe,
            "argv": list(self.argv),
            "target": asdict(self.target),
            "drafter": asdict(self.drafter),
            "gate_input": json.loads(json.dumps(dict(self.gate_input))),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> "CheckedServe":
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise CheckedUnreadable(f"{where}: not a {SCHEMA} record")
        try:
            argv = data["argv"]
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise TypeError("argv must be a list of strings")
            return cls(
                recipe=str(data["recipe"]),
                argv=tuple(argv),
                target=CheckedModel(**data["target"]),
                drafter=CheckedModel(**data["drafter"]),
                gate_input=dict(data["gate_input"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckedUnreadable(f"{where}: malformed {SCHEMA} record: {type(exc).__name__}: {exc}") from None


def write(checked: CheckedServe, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(checked.to_json(), fh, indent=1, sort_keys=True)
        fh.write("\n")


def load(path: str) -> CheckedServe:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise CheckedUnreadable(f"{path}: unreadable: {exc}") from None
    return CheckedServe.from_json(data, path)
