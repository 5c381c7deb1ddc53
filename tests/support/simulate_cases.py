"""Gate inputs the simulator's unit tests share: the default recipe's fields as its files give them,
and a Kimi Linear target under the recipe's drafter."""

from __future__ import annotations

import geometry_cases as C

from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe


def default_recipe_fields() -> dict:
    """The config fields and serving settings the figures are worked out from, read from the recipe's
    files (not from the figures)."""
    t, d = C.recipe_configs()
    raw = gate_input(load_recipe(DEFAULT_RECIPE)).to_json()
    return {"t": t, "d": d, "raw": raw}


def kimi_input(behaviour: str, drafter_layers: int, prefix_caching: bool, **changes) -> dict:
    """A Kimi Linear target (fp8 KV) with the recipe's drafter cut to ``drafter_layers`` sliding layers."""
    _, d = C.recipe_configs()
    d = dict(d, num_hidden_layers=drafter_layers, layer_types=["sliding_attention"] * drafter_layers)
    return C.recipe_input(
        behaviour,
        target_config=C.kimi_linear_config(),
        kv_cache_dtype="fp8",
        drafter_config=d,
        **C.prefix_caching(prefix_caching),
        **changes,
    )
