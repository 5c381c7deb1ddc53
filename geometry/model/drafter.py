"""The DFlash/DFlash2 drafter's attention layers: their sliding windows,
backend and spec builders (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass

from geometry.errors import BadInput
from geometry.image_contract import Role
from geometry.kv import backends as B
from geometry.kv.drafter_backend import DrafterAsk, drafter_backend, selected_backend_error
from geometry.kv.kv_spec import FullAttentionSpec, SimulatedError, SlidingWindowSpec
from geometry.kv.units import DTYPE_BYTES
from geometry.model.inputs import GeometryInputs
from geometry.model.parts import (
    Layer,
    check_cpu_attn,
    check_flash_attn_head_size,
    drafter_attention_builder,
    kv_dtype_name,
    kv_heads_per_rank,
)


@dataclass(frozen=True)
class Drafter:
    layers: tuple[Layer, ...]
    backend: B.Backend | None  # None: vLLM stops before it picks one (error)
    # what vLLM raises when the drafter loads, after the target: planning
    # with the drafter fails, the target alone still plans
    error: SimulatedError | None


def build_drafter(
    inputs: GeometryInputs, kv_cache_dtype: str, model_dtype: str, target_head_size: int, target_kv_cache_dtype: str
) -> Drafter:
    """The drafter's layers, in the order vLLM builds them: ``_resolve_layer_attention`` (windows),
    ``DFlashQwen3Attention.__init__``'s head asserts, then ``Attention.__init__``'s backend choice
    (the speculative config's ``attention_backend``, else vLLM's automatic one: drafter_backend.py;
    ``target_head_size`` and ``target_kv_cache_dtype``: the model config's head size and the cache
    dtype the target's layers run, which that choice reads)."""
    dc = inputs.drafter
    if dc.mixed_windows:
        raise BadInput("mixed sliding/full DFlash drafters need the V2 runner and several drafter groups; not modelled")
    tp = inputs.tensor_parallel_size
    family = inputs.capability_family
    d_dtype = kv_dtype_name(kv_cache_dtype, model_dtype)
    d_heads, d_kv, d_hd = dc.num_attention_heads, dc.num_kv_heads, dc.head_dim
    if family == B.CPU_FAMILY:
        check_cpu_attn(d_hd, kv_cache_dtype)
    # Qwen3DFlashAttention.__init__ asserts the head splits before its Attention picks a backend.
    error = None
    try:
        if d_heads % tp:
            raise SimulatedError("AssertionError", "drafter num_attention_heads not divisible by TP")
        d_kv_local = kv_heads_per_rank(d_kv, tp, "drafter KV heads")
    except SimulatedError as exc:
        error, d_kv_local = exc, max(1, d_kv // tp)
    if error is None and (d_heads // tp) % d_kv_local:
        error = SimulatedError("AssertionError", "drafter num_heads not divisible by num_kv_heads")
    ask = DrafterAsk(
        family=family,
        head_size=d_hd,
        kv_cache_dtype=kv_cache_dtype,
        model_dtype=model_dtype,
        non_causal=dc.non_causal,
        user_block_size=inputs.block_size,
        target_head_size=target_head_size,
        target_kv_cache_dtype=target_kv_cache_dtype,
        vllm=inputs.vllm,
    )
    try:
        backend = drafter_backend(inputs.drafter_attention_backend, ask)
    except SimulatedError as exc:  # vLLM finds no backend for the drafter: it fails to load
        return Drafter((), None, error or exc)
    except BadInput:
        if error is not None:  # vLLM stops at the head asserts, before it picks a backend
            return Drafter((), None, error)
        raise
    if backend.name == "FLASH_ATTN":
        check_flash_attn_head_size(d_hd)
    if error is None and family != B.CPU_FAMILY:  # a pinned backend (vLLM's own choice is valid)
        error = selected_backend_error(backend.name, ask)
    layers = []
    for i, window in enumerate(dc.windows):
        shape = dict(
            block_size=0,
            num_kv_heads=d_kv_local,
            head_size=d_hd,
            head_size_v=d_hd,
            dtype_bytes=DTYPE_BYTES[d_dtype],
            dtype=d_dtype,
            is_draft=True,
        )
        spec = SlidingWindowSpec(sliding_window=window, **shape) if window is not None else FullAttentionSpec(**shape)
        layers.append(
            Layer(
                f"drafter.model.layers.{i}.self_attn.attn",
                Role.DRAFTER,
                "sliding_window" if window is not None else "attention",
                backend,
                drafter_attention_builder(spec, backend),
            )
        )
    return Drafter(tuple(layers), backend, error)
