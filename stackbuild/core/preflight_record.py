"""What the image's pre-flight compares a container start with: written by the build.

The one writer of ``geometry.preflight.checked.CheckedServe`` (the pre-flight is its
reader): the compose command the recipe generates, where it mounts the two
checkpoints, the sha256 of the config snapshots the gate checked, the pinned
revisions, the gate input itself, and a multi-node recipe's per-role argvs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from geometry import GeometryInputs, Role, checked
from stackbuild.core.recipe import Recipe
from stackbuild.core.serve_args import role_commands, serve_argv, served_flags


def snapshot_path(recipe: Recipe, relative: str) -> Path:
    return (recipe.directory / relative).resolve()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def checked_serve(
    recipe: Recipe, gate_input: GeometryInputs, build_gate_failure: Optional[str] = None
) -> checked.CheckedServe:
    models = {}
    for role, model in (
        (Role.TARGET, recipe.target),
        (Role.DRAFTER, recipe.require_drafter("the image's pre-flight record")),
    ):
        models[role] = checked.CheckedModel(
            id=model.id,
            path=model.path,
            revision=model.revision,
            config_sha256=file_sha256(snapshot_path(recipe, model.config)),
            quantization=getattr(model, "quantization", None),
            precision=getattr(model, "precision", None),
        )
    # Recorded as the contract type (a RoleCommand is a CheckedRole that can also fill its slots).
    roles = tuple(
        checked.CheckedRole(role=c.role, nnodes=c.nnodes, argv=c.argv, slots=dict(c.slots))
        for c in role_commands(recipe)
    )
    return checked.CheckedServe(
        recipe=recipe.name,
        argv=tuple(serve_argv(recipe)),
        target=models[Role.TARGET],
        drafter=models[Role.DRAFTER],
        gate_input=gate_input,
        flags=served_flags(recipe),
        roles=roles,
        build_gate_failure=build_gate_failure,
    )
