"""The scenarios `make port` plans with a release's code: each recipe's gate input, as the build writes it
(``stackbuild.core.gate.gate_input``), for that release, and variants of its serving settings.

A variant changes the recipe's serving section before the gate input is derived, so every field that
follows from a setting (``mamba_cache_mode`` from prefix caching, the drafter's state from
``num_speculative_tokens``) follows as it does for a recipe. ``recipes``: each recipe as written;
``full`` adds, per recipe, prefix caching the other way and ``num_speculative_tokens`` 1 and 3.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import load_recipe

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"
MATRICES = ("recipes", "full")
BEHAVIOURS = ("stock", "overlay")  # stock: planned on the pristine tree; overlay: on the tree with the series


@dataclass(frozen=True)
class Scenario:
    name: str  # "<recipe>: <variant>"
    behaviour: str
    inputs: dict  # the gate input (GeometryInputs JSON)


def _variants(serving, matrix: str) -> list:
    out = [("as written", serving)]
    if matrix == "full":
        caching = serving.enable_prefix_caching is not False  # None: vLLM's default for a hybrid, on
        flipped = replace(serving, enable_prefix_caching=not caching)
        out.append((f"prefix caching {'off' if caching else 'on'}", flipped))
        out += [
            (f"num_speculative_tokens {n}", replace(serving, num_speculative_tokens=n))
            for n in (1, 3)
            if n != serving.num_speculative_tokens
        ]
    return out


def scenarios(version: str, matrix: str = "full", recipes=None) -> list:
    """Every recipe (``recipes/*/recipe.yaml``) x variant x behaviour, for vLLM ``version``."""
    from geometry import Behaviour

    out = []
    for path in recipes or sorted(RECIPES.glob("*/recipe.yaml")):
        recipe = load_recipe(path)
        recipe = replace(recipe, base=replace(recipe.base, vllm_version=version))
        for variant, serving in _variants(recipe.serving, matrix):
            for behaviour in BEHAVIOURS:
                inputs = gate_input(replace(recipe, serving=serving), vllm_behaviour=Behaviour(behaviour))
                out.append(Scenario(f"{path.parent.name}: {variant}", behaviour, inputs.to_json()))
    return out
