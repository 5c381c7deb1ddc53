"""`build.py fit`: the search for settings that pass the geometry gate (geometry/verdict/fit.py) run on a recipe,
and its outcome as an exit: none when the recipe passes, 5 when only other settings do, 19 when none does."""

from __future__ import annotations

from geometry import KEPT_UNLESS_ALLOWED, BadInput, Behaviour, FitResult
from geometry import search_fit as search
from stackbuild.core.errors import FitNothingPasses, GeometryGateFailed, RecipeError, UsageError
from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import Recipe


def kept_keys(keep: frozenset[str], allow: frozenset[str]) -> frozenset[str]:
    """The keys held at the recipe's values: ``keep``'s, and KEPT_UNLESS_ALLOWED's that ``allow`` does not open."""
    both = sorted(keep & allow)
    if both:
        raise UsageError(f"--keep and --allow both name {both[0]}: hold it or open it")
    return frozenset(keep) | (frozenset(KEPT_UNLESS_ALLOWED) - allow)


def fit_recipe(
    recipe: Recipe, *, behaviour: Behaviour, keep: frozenset[str], allow: frozenset[str] = frozenset()
) -> FitResult:
    """The search from the recipe's gate input (stock vLLM's behaviour or the overlay's), holding ``keep``
    and, unless ``allow`` opens them, KEPT_UNLESS_ALLOWED."""
    try:
        kept = kept_keys(keep, allow)
        return search(gate_input(recipe, vllm_behaviour=behaviour), keep=kept)
    except BadInput as exc:
        raise RecipeError(recipe.path, "", f"the geometry gate does not model this recipe: {exc}") from None


def refuse_unfit(recipe: Recipe, result: FitResult) -> None:
    """FitNothingPasses when no setting passes; GeometryGateFailed, naming the best one, when the recipe's fails."""
    if result.why_none:
        opened = [k for k in KEPT_UNLESS_ALLOWED if "kept: " in result.searched and k in result.searched]
        hint = "".join(f"; `--allow {k}` searches it too" for k in opened)
        raise FitNothingPasses(f"{recipe.path}: {result.why_none}{hint}")
    if not result.recipe.passed:
        best = ", ".join(f"{k}: {v}" for k, _, v in result.ranked[0].changes)
        raise GeometryGateFailed(f"{recipe.path}: geometry gate failed; passes with {best}")
