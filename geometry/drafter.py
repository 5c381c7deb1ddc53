"""The DFlash/DFlash2 drafter's attention layers: their sliding windows,
backend and spec builders (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass

from . import backends as B
from .errors import BadInput
from .inputs import GeometryInputs
from .kv_spec import (
    DTYPE_BYTES,
    FullAttentionSpec,
    SimulatedError,
    SlidingWindowSpec,
)
from .model_parts import (
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
    backend: B.Backend
    # what vLLM raises when the drafter loads, after the target: planning
    # with the drafter fails, the target alone still plans
    error: SimulatedError | None


def build_drafter(inputs: GeometryInputs, kv_cache_dtype: str, model_dtype: str, backend: B.Backend) -> Drafter:
    """The drafter's layers on ``backend`` (the speculative config's, model.drafter_backend)."""
    dc = inputs.drafter
    if dc.mixed_windows:
        raise BadInput("mixed sliding/full DFlash drafters need the V2 runner and several drafter groups; not modelled")
    tp = inputs.tensor_parallel_size
    error = None
    if not backend.takes_kv_cache_dtype(kv_cache_dtype):
        if inputs.drafter_attention_backend in (None, "auto"):
            raise BadInput(
                f"the drafter's KV dtype {kv_cache_dtype!r} rules out {backend.name}; "
                "vLLM would pick another drafter backend (not modelled)"
            )
        error = SimulatedError(
            "ValueError",
            f"Selected backend {backend.name} is not valid "
            f"for the drafter: kv_cache_dtype {kv_cache_dtype!r} not supported (it "
            f"takes {', '.join(backend.kv_cache_dtypes)})",
        )
    d_dtype = kv_dtype_name(kv_cache_dtype, model_dtype)
    d_heads, d_kv, d_hd = dc.num_attention_heads, dc.num_kv_heads, dc.head_dim
    if backend is B.CPU_ATTN:
        check_cpu_attn(d_hd, kv_cache_dtype)
    else:
        check_flash_attn_head_size(d_hd)
    # Qwen3DFlashAttention.__init__ asserts the head splits before its Attention picks a backend.
    try:
        if d_heads % tp:
            raise SimulatedError("AssertionError", "drafter num_attention_heads not divisible by TP")
        d_kv_local = kv_heads_per_rank(d_kv, tp, "drafter KV heads")
    except SimulatedError as exc:
        error, d_kv_local = exc, max(1, d_kv // tp)
    if error is None and (d_heads // tp) % d_kv_local:
        error = SimulatedError("AssertionError", "drafter num_heads not divisible by num_kv_heads")
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
                "drafter",
                "sliding_window" if window is not None else "attention",
                backend,
                drafter_attention_builder(spec, backend),
            )
        )
    return Drafter(tuple(layers), backend, error)
