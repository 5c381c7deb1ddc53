"""`build.py record`: the oracle record the gate left in a built image, copied next to the recipe
(stackbuild/image/oracle_record.py checks and writes it: recipe.oracle.json, or one file per platform of
a multi-platform recipe, which is why such a recipe's record is copied for the platform named)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from stackbuild.core.errors import RecipeError
from stackbuild.core.recipe import Recipe
from stackbuild.image.connect import connect
from stackbuild.image.engine_errors import engine_errors
from stackbuild.image.oracle_record import save_from_image
from stackbuild.image.plan import BuildPlan, make_plan
from stackbuild.image.platform_plans import selected_platforms


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


def recorded_platform(recipe: Recipe, platform: Optional[str]) -> Recipe:
    """``recipe`` building the platform whose record is copied: ``platform``, required when there are several."""
    if platform is None and len(recipe.platforms) > 1:
        raise RecipeError(
            recipe.path,
            "platforms",
            f"one oracle record per platform ({', '.join(recipe.platforms)}): name the one to copy with --platform",
        )
    (chosen,) = selected_platforms(recipe, platform)
    return recipe.for_platform(chosen)


def copy_record(
    recipe: Recipe,
    *,
    owner: Optional[str],
    repository: Optional[str],
    allow_unpinned: bool,
    image: Optional[str] = None,
    platform: Optional[str] = None,
) -> CopiedRecord:
    """The record of ``image`` (default: the recipe's pinned tag in the local engine, that platform's for a
    multi-platform recipe) written next to the recipe; the recipe's current record is neither read nor
    required (this replaces it)."""
    plan = make_plan(
        recorded_platform(recipe, platform),
        owner=owner,
        repository=repository,
        allow_unpinned=allow_unpinned,
        read_oracle_record=False,
    )
    image = image or recorded_image(plan)
    with engine_errors(f"record from {image}"):
        path, kept = save_from_image(connect(), image, plan.recipe, plan.gate_input, plan.payload_dir)
    return CopiedRecord(image, path, kept["key"])
