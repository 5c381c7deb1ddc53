"""`build.py fit`: the search for settings that pass the geometry gate (geometry/fit.py) run on a recipe,
and its outcome as an exit: none when the recipe passes, 5 when only other settings do, 19 when none does."""

from __future__ import annotations

from geometry.errors import BadInput
from geometry.fit import FitResult, search
from stackbuild.core.errors import FitNothingPasses, GeometryGateFailed, RecipeError
from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import Recipe


def fit_recipe(recipe: Recipe, *, stock: bool, keep: frozenset[str]) -> FitResult:
    """The search from the recipe's gate input (stock vLLM's behaviour or the overlay's), holding ``keep``."""
    try:
        return search(gate_input(recipe, vllm_behaviour="stock" if stock else "overlay"), keep=keep)
    except BadInput as exc:
        raise RecipeError(recipe.path, "", f"the geometry gate does not model this recipe: {exc}") from None


def refuse_unfit(recipe: Recipe, result: FitResult) -> None:
    """FitNothingPasses when no setting passes; GeometryGateFailed, naming the best one, when the recipe's fails."""
    if result.why_none:
        raise FitNothingPasses(f"{recipe.path}: {result.why_none}")
    if not result.recipe.passed:
        best = ", ".join(f"{k}: {v}" for k, _, v in result.ranked[0].changes)
        raise GeometryGateFailed(f"{recipe.path}: geometry gate failed; passes with {best}")
