"""The geometry gate of a recipe on the host: its gate input, and the gate (geometry.verdict.gate_run) run on it."""

from __future__ import annotations

from typing import Optional

from geometry import Behaviour
from stackbuild.core.errors import GeometryGateFailed, RecipeError
from stackbuild.core.gpus import serve_batched_tokens
from stackbuild.core.recipe import Recipe
from stackbuild.core.serve_args import served_flags

GIB = 1024**3


def serve_defaults(recipe: Recipe, *, vllm_behaviour: Behaviour = Behaviour.OVERLAY):
    """What the recipe's gate input takes where its serve argv gives no flag
    (geometry.model.serve_settings.ServeDefaults):
    its machines and GPU family (on vLLM's CPU platform, this machine's CPU), the KV budget of
    geometry.kv_cache_memory_gib, and `vllm serve`'s batch for the GPU (core/gpus.py)."""
    from geometry import ServeDefaults, serving_cpu_avx512_bf16

    s = recipe.serving
    family = recipe.hardware.capability_family
    return ServeDefaults(
        nodes=s.nodes,
        capability_family=family,
        cpu_avx512_bf16=serving_cpu_avx512_bf16(family),
        vllm_behaviour=vllm_behaviour,
        vllm_version=recipe.base.vllm_version,
        kv_cache_memory_bytes=int(recipe.geometry.kv_cache_memory_gib * GIB),
        max_num_batched_tokens=serve_batched_tokens(recipe.hardware.gpu, s.tensor_parallel_size),
    )


def gate_input(recipe: Recipe, *, vllm_behaviour: Behaviour = Behaviour.OVERLAY):
    """The recipe's geometry.model.inputs.GeometryInputs: what the build writes as gate-input.json.

    The geometry of what the recipe's serve argv means to vLLM (core/serve_args.served_flags, the flags
    the image's pre-flight records) on the recipe's configs, as the pre-flight derives it from an argv
    at start. What the simulator does not take is a RecipeError.
    """
    from geometry import BadInput, build_inputs

    defaults = serve_defaults(recipe, vllm_behaviour=vllm_behaviour)
    settings = served_flags(recipe).settings(defaults)
    try:
        return build_inputs(settings, target_config=recipe.target_config, drafter_config=recipe.drafter_config)
    except BadInput as exc:
        raise RecipeError(recipe.path, "", f"the geometry gate does not model this recipe: {exc}") from None


def recipe_geometry(
    recipe: Recipe, *, vllm_behaviour: Behaviour = Behaviour.OVERLAY, kv_cache_memory_bytes: Optional[int] = None
):
    """The gate run (geometry.verdict.gate_run.GateRun: inputs, report, verdict) of a recipe on the host
    (``kv_cache_memory_bytes``: the memory ``--kv-cache-memory-bytes`` gives the KV cache instead of the
    recipe's); what the simulator does not model is a RecipeError."""
    from geometry import BadInput, run_gate

    inputs = gate_input(recipe, vllm_behaviour=vllm_behaviour)
    if kv_cache_memory_bytes is not None:
        inputs = inputs.replace(kv_cache_memory_bytes=kv_cache_memory_bytes)
    try:
        return run_gate(inputs)
    except BadInput as exc:
        raise RecipeError(recipe.path, "", f"the geometry gate does not model this recipe: {exc}") from None


def summarise_reasons(reasons, rest: str = "`build.py geometry` shows all") -> str:
    """One line for an error: the first reason, and how many more there are and where (``rest``)."""
    if not reasons:
        return "no reason given"
    more = len(reasons) - 1
    return reasons[0] + (f" (and {more} more; {rest})" if more else "")


def refuse_failed(recipe: Recipe, run, rest: str = "`build.py geometry` shows all") -> None:
    """GeometryGateFailed (exit 5) with the first reason when the gate run failed; ``rest`` says where the
    other reasons are (the `geometry` command has just printed them)."""
    if not run.verdict.passed:
        summary = summarise_reasons(run.verdict.reasons, rest)
        raise GeometryGateFailed(f"{recipe.path}: geometry gate failed: {summary}")


def require_passing(recipe: Recipe):
    """The recipe's gate run, which must pass: nothing serves or is generated for a recipe it fails."""
    run = recipe_geometry(recipe)
    refuse_failed(recipe, run)
    return run
