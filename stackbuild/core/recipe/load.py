"""Loading a recipe: its YAML read and typed, the GPU's facts filled in, the configs read, the rules checked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from stackbuild.core.errors import RecipeError
from stackbuild.core.recipe.files import read_config, read_yaml
from stackbuild.core.recipe.hardware import resolve_hardware
from stackbuild.core.recipe.rules import check_pins, check_rules, check_speculation
from stackbuild.core.recipe.values import Recipe
from stackbuild.core.schema import build_dataclass


def load_recipe(path: str | Path) -> Recipe:
    """Load and validate a recipe file; raise :class:`RecipeError` on any fault."""
    path = Path(path)
    data = read_yaml(path)
    if data is None:
        raise RecipeError(path, "", "recipe is empty")
    recipe = build_dataclass(path, "", Recipe, data)
    check_speculation(path, recipe)
    if bool(recipe.platform) == bool(recipe.platforms):
        raise RecipeError(path, "platform", "give either `platform: linux/...` or `platforms: [linux/..., ...]`")
    platforms = recipe.platforms or (recipe.platform,)
    platform_keys = tuple(f"platforms[{i}]" for i in range(len(platforms))) if recipe.platforms else ("platform",)
    recipe = replace(recipe, hardware=resolve_hardware(path, recipe.hardware))
    target_config = read_config(path, "target.config", recipe.target.config)
    drafter_config = read_config(path, "drafter.config", recipe.drafter.config) if recipe.drafter is not None else {}
    recipe = Recipe(
        **{
            f: getattr(recipe, f)
            for f in recipe.__dataclass_fields__
            if not f.startswith("_") and not f.startswith("platform")
        },
        platform=platforms[0],
        platforms=platforms,
        _path=path.resolve(),
        _target_config=MappingProxyType(target_config),
        _drafter_config=MappingProxyType(drafter_config),
    )
    check_rules(path, recipe, platform_keys)
    check_pins(path, recipe)
    return recipe
