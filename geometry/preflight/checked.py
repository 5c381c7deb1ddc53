"""What the build checked, recorded in the image for the pre-flight (stdlib only).

One typed definition: the build writes it (``write``, from the recipe), the
pre-flight reads it (``load``). The fast path compares the container's argv and
the mounted configs' sha256 with it; the slow path takes from its gate input
what no serve flag says (GPU family, memory for the KV cache). Where it lies in
the image: geometry/image_contract.py (``PREFLIGHT_CHECKED``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Optional

from geometry.model.inputs import GeometryInputs
from geometry.preflight.serve_flags import ServeFlags
from overlay.json_shape import read_json

SCHEMA = "glm53-preflight-checked/1"


class CheckedUnreadable(ValueError):
    """The record of what the build checked is missing or malformed."""


@dataclass(frozen=True)
class CheckedModel:
    """One checkpoint as the build saw it: where the argv mounts it and its config snapshot."""

    id: str
    path: str  # the directory the argv names, inside the container
    revision: Optional[str]  # the checkpoint commit the recipe pins (None: not pinned)
    config_sha256: str  # sha256 of the config.json snapshot the gate checked
    # What the recipe says the weights are: the target's quantization (vLLM's name, "none":
    # unquantized; None: not stated), the drafter's precision ("bf16", "mxfp8").
    quantization: Optional[str] = None
    precision: Optional[str] = None


# The names of a role's slots (argv positions filled where the role is deployed): the address
# the API server binds, the leader's address, a worker's node rank. Only the node rank is
# checked (1 to nnodes - 1); the other slots take any value.
HOST_SLOT, MASTER_ADDR_SLOT, NODE_RANK_SLOT = "host", "master_addr", "node_rank"


@dataclass(frozen=True)
class CheckedRole:
    """One node role's argv of a multi-node recipe, as generated (compose per role, Kubernetes).

    ``slots`` maps a deploy-time value's name to its argv position (the leader's address,
    the API server's bind address, a worker's node rank); every other element is fixed.
    """

    role: str  # "leader" or "worker"
    nnodes: int
    argv: tuple[str, ...]
    slots: Mapping[str, int]

    def matches(self, argv: tuple[str, ...]) -> bool:
        """Whether ``argv`` is this role's argv with its slots filled (a worker's rank in 1..nnodes-1)."""
        if len(argv) != len(self.argv):
            return False
        free = set(self.slots.values())
        if any(a != b for i, (a, b) in enumerate(zip(argv, self.argv)) if i not in free):
            return False
        rank_at = self.slots.get(NODE_RANK_SLOT)
        if rank_at is not None:
            rank = argv[rank_at]
            if not (rank.isdigit() and 1 <= int(rank) < self.nnodes):
                return False
        return True


@dataclass(frozen=True)
class CheckedServe:
    recipe: str
    argv: tuple[str, ...]  # after `vllm serve`: the compose command
    target: CheckedModel
    drafter: CheckedModel
    gate_input: GeometryInputs  # what the build's gate checked
    flags: ServeFlags  # what ``argv`` means to vLLM's serve parser (the fast path reads it instead of parsing)
    roles: tuple[CheckedRole, ...] = ()  # a multi-node recipe's per-role argvs (same geometry per rank)
    # The build's gate failed this geometry and kept the image (`build --allow-gate-failure`, a stock
    # comparison image): its first reason. None for every image whose gate passed.
    build_gate_failure: Optional[str] = None

    def as_built(self, argv: tuple[str, ...]) -> bool:
        """Whether ``argv`` is a command the build generated and checked (single-node, or a node role)."""
        return argv == self.argv or any(role.matches(argv) for role in self.roles)

    def to_json(self) -> dict:
        data = {
            "schema": SCHEMA,
            "recipe": self.recipe,
            "argv": list(self.argv),
            "target": asdict(self.target),
            "drafter": asdict(self.drafter),
            "gate_input": json.loads(json.dumps(self.gate_input.to_json())),
            "flags": self.flags.to_json(),
        }
        if self.roles:  # a single-node record stays as it was
            data["roles"] = [
                {"role": r.role, "nnodes": r.nnodes, "argv": list(r.argv), "slots": dict(r.slots)} for r in self.roles
            ]
        if self.build_gate_failure is not None:  # likewise, a passing image's record
            data["build_gate_failure"] = self.build_gate_failure
        return data

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
                gate_input=GeometryInputs.from_json(data["gate_input"]),
                flags=ServeFlags.from_json(data["flags"]),
                roles=tuple(_role(r) for r in data.get("roles", ())),
                build_gate_failure=_optional_text(data.get("build_gate_failure")),
            )
        except (KeyError, TypeError, ValueError) as exc:  # BadInput is a ValueError
            raise CheckedUnreadable(f"{where}: malformed {SCHEMA} record: {type(exc).__name__}: {exc}") from None


def _optional_text(value: Any) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise TypeError("build_gate_failure must be a string")
    return value


def _role(data: Any) -> CheckedRole:
    argv = data["argv"]
    slots = data["slots"]
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise TypeError("roles[].argv must be a list of strings")
    if not isinstance(slots, Mapping) or not all(isinstance(i, int) and 0 <= i < len(argv) for i in slots.values()):
        raise TypeError("roles[].slots must map names to argv positions")
    return CheckedRole(role=str(data["role"]), nnodes=int(data["nnodes"]), argv=tuple(argv), slots=dict(slots))


def write(checked: CheckedServe, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(checked.to_json(), fh, indent=1, sort_keys=True)
        fh.write("\n")


def load(path: str) -> CheckedServe:
    return CheckedServe.from_json(read_json(CheckedUnreadable, path), path)
