"""The build plans a command works on: one per platform of the recipe, each made by stackbuild/image/plan.py.

``build`` plans the platforms it builds (all, or the one ``--platform`` names); ``push`` and ``index``
plan every platform of an image already built, checking first that it can be pushed.
"""

from __future__ import annotations

from typing import Optional

from geometry import Behaviour
from stackbuild.core.errors import RecipeError, UsageError
from stackbuild.core.recipe import Recipe
from stackbuild.image.pipeline import platform_plan
from stackbuild.image.plan import BuildPlan, make_plan


def selected_platforms(recipe: Recipe, platform: Optional[str]) -> tuple[str, ...]:
    """The recipe's platforms, or the one --platform names (a recipe error if it is not one of them)."""
    if platform is None:
        return recipe.platforms
    if platform not in recipe.platforms:
        raise RecipeError(
            recipe.path,
            "platforms" if len(recipe.platforms) > 1 else "platform",
            f"--platform {platform} is not one of the recipe's ({', '.join(recipe.platforms)})",
        )
    return (platform,)


def build_plans(
    recipe: Recipe,
    platform: Optional[str],
    *,
    owner: Optional[str],
    repository: Optional[str],
    allow_unpinned: bool,
    push: bool,
    behaviour: Behaviour = Behaviour.OVERLAY,
    gate_failure_allowed: bool = False,
) -> list[BuildPlan]:
    """What ``build`` builds: a plan per selected platform; ``--platform`` of a multi-platform recipe
    builds that one image of the index, tagged ``<pinned tag>-<arch>``. With ``push``, the first plan
    must be pushable (a dry run refuses what the real push would); an image whose gate failure is
    allowed never is."""
    if push and gate_failure_allowed:
        raise UsageError(
            "--allow-gate-failure with --push: an image whose gate failed is built for comparison, never pushed"
        )
    plans = [
        make_plan(
            recipe.for_platform(p),
            owner=owner,
            repository=repository,
            allow_unpinned=allow_unpinned,
            behaviour=behaviour,
            gate_failure_allowed=gate_failure_allowed,
        )
        for p in selected_platforms(recipe, platform)
    ]
    if platform and len(recipe.platforms) > 1:
        plans = [platform_plan(plans[0])]
    if push:
        plans[0].require_pushable()
    return plans


def publish_plans(
    recipe: Recipe, *, owner: Optional[str], repository: Optional[str], allow_unpinned: bool
) -> list[BuildPlan]:
    """What ``push`` and ``index`` publish: every platform's plan of an image already built (the
    recipe's oracle record is neither read nor required), refused first unless it can be pushed."""
    plans = [
        make_plan(
            recipe.for_platform(p),
            owner=owner,
            repository=repository,
            allow_unpinned=allow_unpinned,
            read_oracle_record=False,
        )
        for p in recipe.platforms
    ]
    plans[0].require_pushable()
    return plans
