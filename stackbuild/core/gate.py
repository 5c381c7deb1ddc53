"""The geometry gate of a recipe on the host: its gate input, and the simulator and gate run on it."""
from __future__ import annotations

from typing import Mapping

from stackbuild.core.errors import RecipeError
from stackbuild.core.recipe import Recipe

GIB = 1024**3


def gate_input(recipe: Recipe, *, vllm_behaviour: str = "overlay") -> dict:
    """The geometry gate's inputs, as the in-image gate reads them (JSON).

    Prefix caching and mamba_cache_mode as vLLM resolves them from the flags the
    compose command passes (serving.enable_prefix_caching; unset: vLLM's default).
    """
    from geometry.inputs import BadInput, resolve_prefix_caching

    s = recipe.serving
    try:
        prefix_caching, mamba_cache_mode = resolve_prefix_caching(recipe.target_config, s.enable_prefix_caching)
    except BadInput as exc:
        raise RecipeError(recipe.path, "target.config", str(exc)) from None
    return {
        "target_config": dict(recipe.target_config),
        "drafter_config": dict(recipe.drafter_config),
        "tensor_parallel_size": s.tensor_parallel_size,
        "nodes": s.nodes,
        "kv_cache_dtype": s.kv_cache_dtype,
        "drafter_kv_cache_dtype": s.drafter_kv_cache_dtype,
        "num_speculative_tokens": s.num_speculative_tokens,
        "capability_family": recipe.hardware.capability_family,
        "mamba_cache_mode": mamba_cache_mode,
        "enable_prefix_caching": prefix_caching,
        "block_size": s.block_size,
        "max_model_len": s.max_model_len,
        "max_num_seqs": s.max_num_seqs,
        "drafter_attention_backend": recipe.drafter.attention_backend,
        "kv_cache_memory_bytes": int(recipe.geometry.kv_cache_memory_gib * GIB),
        "vllm_behaviour": vllm_behaviour,
    }


def host_geometry(gate: Mapping):
    """Run the simulator and the gate on the host (the same code the image runs).

    Raises geometry.inputs.BadInput for configs or inputs the simulator does not model.
    """
    from geometry.gate import judge
    from geometry.inputs import GeometryInputs
    from geometry.model_config import check_configs
    from geometry.simulate import simulate

    inputs = GeometryInputs.from_json(dict(gate))
    check_configs(inputs.target_config, inputs.drafter_config)
    report = simulate(inputs)
    return report, judge(report, inputs)


def recipe_geometry(recipe: Recipe, *, vllm_behaviour: str = "overlay"):
    """(gate input, report, verdict) of a recipe on the host; what the simulator does not model is a RecipeError."""
    from geometry.inputs import BadInput

    gate = gate_input(recipe, vllm_behaviour=vllm_behaviour)
    try:
        report, verdict = host_geometry(gate)
    except BadInput as exc:
        raise RecipeError(recipe.path, "", f"the geometry gate does not model this recipe: {exc}") from None
    return gate, report, verdict


def summarise_reasons(reasons) -> str:
    """One line for an error: the first reason, and how many more the table shows."""
    if not reasons:
        return "no reason given"
    more = len(reasons) - 1
    return reasons[0] + (f" (and {more} more; `build.py geometry` shows all)" if more else "")
