"""The layer objects vLLM's planning collects specs from, for a ``GeometryInputs``: the
target's from its architecture's entry (geometry/oracle/architectures/), then the drafter's.

Every layer class's own ``get_kv_cache_spec`` runs. How each layer object is made
(layer_objects.py):

* the drafter's ``Attention`` layers and the target's full-attention layers: vLLM's
  ``Attention`` constructor (kernel implementation stood in). The drafter's layers are
  built as ``load_dflash_model`` builds them: the draft config's ``use_non_causal`` from
  ``dflash_has_any_non_causal``, the speculative config's ``attention_backend`` and KV cache
  dtype, each layer's window and the backend vLLM's selector (``CudaPlatform``'s for the
  serving capability, ``CpuPlatform``'s on the CPU) picks for it; then tagged as
  ``Speculator.load_model`` tags the layers the drafter added. ``DFlashQwen3Attention``'s
  own constructor is not run (its linear layers need vLLM's tensor-parallel group of the
  served TP): its head split and asserts are restated here. The target's full-attention
  layers are given the simulator's backend class (geometry/kv/backends.py), not vLLM's choice.
* the GLM-5.3 indexer: vLLM's ``Indexer`` module on the meta device (architectures/glm5next.py);
* MLA, KDA/GDN: ``bare_layer`` (their constructors need the TP group of the served size or
  CUDA kernels).
"""

from __future__ import annotations

from geometry.model.inputs import GeometryInputs
from geometry.oracle.architectures import oracle_architecture
from geometry.oracle.layer_objects import attention_layer


def register_layers(inputs: GeometryInputs, cfg, hf, num_spec: int, with_drafter: bool) -> None:
    """Put the model's (and, ``with_drafter``, the drafter's) layers in ``cfg``'s
    static forward context, in vLLM's registration order."""
    from vllm.config import set_current_vllm_config

    drafter = inputs.drafter_config if with_drafter else None
    ctx = cfg.compilation_config.static_forward_context
    ctx.clear()
    with set_current_vllm_config(cfg):
        oracle_architecture(inputs.target.kind).register_layers(inputs, cfg, hf, ctx, num_spec)
    if drafter is not None:
        _drafter_layers(inputs, cfg, drafter, ctx)


def drafter_hf_config(drafter: dict):
    """The drafter's config as vLLM loads it (``model_type`` qwen3: transformers' ``Qwen3Config``)."""
    from transformers import Qwen3Config

    return Qwen3Config(**{k: v for k, v in drafter.items() if not k.startswith("_")})


def _drafter_layers(inputs: GeometryInputs, cfg, drafter: dict, ctx) -> None:
    """The DFlash drafter's ``Attention`` layers at ``drafter.model.layers.{i}.self_attn.attn``."""
    from vllm.config import set_current_vllm_config
    from vllm.config.utils import replace
    from vllm.model_executor.models.qwen3_dflash import (
        _resolve_layer_attention,
        dflash_has_any_non_causal,
    )

    hf = drafter_hf_config(drafter)
    spec = cfg.speculative_config
    target_attention = cfg.attention_config
    # load_dflash_model: the draft config selects a backend for the drafter's causality, with the
    # speculative config's attention_backend and KV cache dtype (else the cache config's, as the
    # target's layers left it).
    cache = cfg.cache_config
    if spec.kv_cache_dtype is not None:
        cache = replace(cache, cache_dtype=spec.kv_cache_dtype)
    cfg.attention_config = replace(
        target_attention, use_non_causal=dflash_has_any_non_causal(hf), backend=spec.attention_backend
    )
    before = set(ctx)
    try:
        with set_current_vllm_config(cfg):
            tp = inputs.tensor_parallel_size
            heads = hf.num_attention_heads
            total_kv = hf.num_key_value_heads or heads
            hd = getattr(hf, "head_dim", None) or hf.hidden_size // heads
            for i in range(hf.num_hidden_layers):
                window, _ = _resolve_layer_attention(hf, i)  # DFlashQwen3DecoderLayer, first
                # DFlashQwen3Attention.__init__, before its Attention picks a backend.
                assert heads % tp == 0
                if total_kv >= tp:
                    assert total_kv % tp == 0
                else:
                    assert tp % total_kv == 0
                attention_layer(
                    f"drafter.model.layers.{i}.self_attn.attn",
                    heads // tp,
                    max(1, total_kv // tp),
                    hd,
                    cache,
                    window,
                    cfg.model_config.dtype,
                )
    finally:
        cfg.attention_config = target_attention
    for name in set(ctx) - before:  # Speculator.load_model
        ctx[name].is_draft_layer = True
