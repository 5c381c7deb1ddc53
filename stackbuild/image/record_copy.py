"""`build.py record`: the oracle record the gate left in a built image, copied to the recipe's
recipe.oracle.json (stackbuild/image/oracle_record.py checks and writes it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from stackbuild.core.recipe import Recipe
from stackbuild.image.connect import connect
from stackbuild.image.engine_errors import engine_errors
from stackbuild.image.oracle_record import save_from_image
from stackbuild.image.plan import BuildPlan, make_plan


@dataclass(frozen=True)
class CopiedRecord:
    """The image the record came from, where it was written, and its key (what the gate checks it against)."""

    image: str
    path: Path
    key: Mapping[str, Any]


def recorded_image(plan: BuildPlan) -> str:
    """The image ``record`` reads when none is given: the plan's pinned tag in the local engine (a
    multi-platform recipe's images are tagged per platform, ``<pinned tag>-<arch>``)."""
    name = plan.image if len(plan.recipe.platforms) == 1 else plan.image.for_architecture(plan.recipe.architecture)
    return str(name.reference(name.pinned_tags[0] if name.pinned_tags else name.tags[0]))


def copy_record(
    recipe: Recipe,
    *,
    owner: Optional[str],
    repository: Optional[str],
    allow_unpinned: bool,
    image: Optional[str] = None,
) -> CopiedRecord:
    """The record of ``image`` (default: the recipe's pinned tag in the local engine) written next to the
    recipe; the recipe's current record is neither read nor required (this replaces it)."""
    plan = make_plan(
        recipe,
        owner=owner,
        repository=repository,
        allow_unpinned=allow_unpinned,
        read_oracle_record=False,
    )
    image = image or recorded_image(plan)
    with engine_errors(f"record from {image}"):
        path, kept = save_from_image(connect(), image, plan.recipe, plan.gate_input, plan.payload_dir)
    return CopiedRecord(image, path, kept["key"])
