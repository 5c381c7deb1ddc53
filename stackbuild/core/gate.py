"""The geometry gate of a recipe on the host: its gate input, and the gate (geometry.gate_run) run on it."""
from __future__ import annotations

from stackbuild.core.errors import GeometryGateFailed, RecipeError
from stackbuild.core.gpus import serve_batched_tokens
from stackbuild.core.recipe import Recipe

GIB = 1024**3


def gate_input(recipe: Recipe, *, vllm_behaviour: str = "overlay"):
    """The recipe's geometry.inputs.GeometryInputs: what the build writes as gate-input.json.

    Prefix caching and mamba_cache_mode as vLLM resolves them from the flags the
    compose command passes (serving.enable_prefix_caching; unset: vLLM's default).
    What the simulator does not take is a RecipeError.
    """
    from geometry.errors import BadInput
    from geometry.inputs import build_inputs

    s = recipe.serving
    try:
        return build_inputs(
            target_config=recipe.target_config,
            drafter_config=recipe.drafter_config,
            tensor_parallel_size=s.tensor_parallel_size,
            nodes=s.nodes,
            kv_cache_dtype=s.kv_cache_dtype,
            drafter_kv_cache_dtype=s.drafter_kv_cache_dtype,
            num_speculative_tokens=s.num_speculative_tokens,
            capability_family=recipe.hardware.capability_family,
            enable_prefix_caching=s.enable_prefix_caching,
            block_size=s.block_size,
            max_model_len=s.max_model_len,
            max_num_seqs=s.max_num_seqs,
            max_num_batched_tokens=(s.max_num_batched_tokens if s.max_num_batched_tokens is not None
                                    else serve_batched_tokens(recipe.hardware.gpu, s.tensor_parallel_size)),
            drafter_attention_backend=recipe.drafter.attention_backend if recipe.drafter else None,
            kv_cache_memory_bytes=int(recipe.geometry.kv_cache_memory_gib * GIB),
            vllm_behaviour=vllm_behaviour,
        )
    except BadInput as exc:
        raise RecipeError(recipe.path, "", f"the geometry gate does not model this recipe: {exc}") from None


def recipe_geometry(recipe: Recipe, *, vllm_behaviour: str = "overlay"):
    """The gate run (geometry.gate_run.GateRun: inputs, report, verdict) of a recipe on the host;
    what the simulator does not model is a RecipeError."""
    from geometry.gate_run import run_gate
    from geometry.errors import BadInput

    inputs = gate_input(recipe, vllm_behaviour=vllm_behaviour)
    try:
        return run_gate(inputs)
    except BadInput as exc:
        raise RecipeError(recipe.path, "", f"the geometry gate does not model this recipe: {exc}") from None


def summarise_reasons(reasons) -> str:
    """One line for an error: the first reason, and how many more the table shows."""
    if not reasons:
        return "no reason given"
    more = len(reasons) - 1
    return reasons[0] + (f" (and {more} more; `build.py geometry` shows all)" if more else "")


def refuse_failed(recipe: Recipe, run) -> None:
    """GeometryGateFailed (exit 5) with the first reason when the gate run failed."""
    if not run.verdict.passed:
        raise GeometryGateFailed(f"{recipe.path}: geometry gate failed: {summarise_reasons(run.verdict.reasons)}")


def require_passing(recipe: Recipe):
    """The recipe's gate run, which must pass: nothing serves or is generated for a recipe it fails."""
    run = recipe_geometry(recipe)
    refuse_failed(recipe, run)
    return run

