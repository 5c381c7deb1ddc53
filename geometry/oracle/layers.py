"""The layer objects vLLM's planning collects specs from, for a ``GeometryInputs``: the
target's from its architecture's entry (geometry/oracle/architectures/), then the drafter's.

Every layer class's own ``get_kv_cache_spec`` runs (KDA/GDN, MLA, the GLM
sparse-indexer and kpool-tail caches, the drafter's ``Attention``); layers whose
constructors build CUDA kernels (MLA, KDA/GDN, ``Attention``) are created
without their constructors and given the attributes their ``get_kv_cache_spec``
reads (``bare_layer``); the GLM indexer and kpool-tail caches are constructed
normally.  The backend *choice* (which needs libcuda in vLLM) is the
simulator's table (geometry/backends.py), mapped to vLLM's classes here.
"""

from __future__ import annotations

from ..inputs import GeometryInputs
from .architectures import ORACLE_ARCHITECTURES
from .layer_objects import attention_layer, backend_classes


def register_layers(inputs: GeometryInputs, cfg, hf, num_spec: int, with_drafter: bool) -> None:
    """Put the model's (and, ``with_drafter``, the drafter's) layers in ``cfg``'s
    static forward context, in vLLM's registration order."""
    from vllm.config import set_current_vllm_config

    drafter = inputs.drafter_config if with_drafter else None
    ctx = cfg.compilation_config.static_forward_context
    ctx.clear()
    _, fa_cls = backend_classes(inputs.capability_family)
    with set_current_vllm_config(cfg):
        ORACLE_ARCHITECTURES[inputs.target.kind].register_layers(inputs, cfg, hf, ctx, num_spec)
        if drafter is not None:
            _drafter_layers(inputs, cfg, drafter, ctx, fa_cls)


def _drafter_layers(inputs: GeometryInputs, cfg, drafter: dict, ctx, fa_cls) -> None:
    """The DFlash drafter's ``Attention`` layers at ``drafter.model.layers.{i}.self_attn.attn``."""
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

    # load_dflash_model: the drafter's own dtype, else the cache
    # config's as the target's layers left it
    d_kv_str = cfg.speculative_config.kv_cache_dtype or cfg.cache_config.cache_dtype
    tp = inputs.tensor_parallel_size
    heads = drafter["num_attention_heads"]
    total_kv = drafter.get("num_key_value_heads") or heads
    # Qwen3DFlashAttention.__init__ (vllm/model_executor/models/qwen3_dflash.py), before its
    # Attention picks a backend.
    assert heads % tp == 0
    if total_kv >= tp:
        assert total_kv % tp == 0
    else:
        assert tp % total_kv == 0
    if not _drafter_backend_takes(fa_cls, d_kv_str, inputs.capability_family):
        raise ValueError(  # CudaPlatform.get_attn_backend_cls, selected backend
            f"Selected backend {fa_cls.get_name()} is not valid for this "
            "configuration. Reason: ['kv_cache_dtype not supported']"
        )
    hd = drafter.get("head_dim") or drafter["hidden_size"] // heads
    for i, window in enumerate(inputs.drafter.windows):
        name = f"drafter.model.layers.{i}.self_attn.attn"
        ctx[name] = attention_layer(
            fa_cls,
            name,
            max(1, total_kv // inputs.tensor_parallel_size),
            hd,
            d_kv_str,
            kv_cache_dtype_str_to_dtype(d_kv_str, cfg.model_config),
            window,
            True,
        )


def _drafter_backend_takes(fa_cls, kv_cache_dtype: str, family: int) -> bool:
    """FLASH_ATTN's ``supports_kv_cache_dtype``.  Whether it takes a quantized
    cache depends on the FA version: on family 120 vLLM always runs FA2, which
    takes none (``flash_attn_supports_kv_cache_dtype``, called here with the
    capability reported); elsewhere the version comes from the installed
    flash-attn build, which a CPU box lacks, so only the class's dtype list
    is read there (geometry/backends.py states the assumption)."""
    if family == 120:
        return fa_cls.supports_kv_cache_dtype(kv_cache_dtype)
    return kv_cache_dtype in fa_cls.supported_kv_cache_dtypes
