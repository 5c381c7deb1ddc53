"""The layer objects vLLM's planning collects specs from, for a ``GeometryInputs``.

Every layer class's own ``get_kv_cache_spec`` runs (KDA/GDN, MLA, the GLM
sparse-indexer and kpool-tail caches, the drafter's ``Attention``); layers whose
constructors build CUDA kernels (MLA, KDA/GDN, ``Attention``) are created
without their constructors and given the attributes their ``get_kv_cache_spec``
reads (``bare_layer``); the GLM indexer and kpool-tail caches are constructed
normally.  The backend *choice* (which needs libcuda in vLLM) is the
simulator's table (geometry/backends.py), mapped to vLLM's classes here.
"""

from __future__ import annotations

from .. import backends as B
from ..drafter import drafter_sliding_windows
from ..inputs import GeometryInputs
from .cpu_shims import import_glm5next, import_kernel_module


def bare_layer(cls, **attrs):
    """An instance whose constructor (which builds CUDA kernels) is skipped."""
    import torch.nn as nn

    obj = cls.__new__(cls)
    if isinstance(obj, nn.Module):
        nn.Module.__init__(obj)
    for k, v in attrs.items():
        object.__setattr__(obj, k, v)
    return obj


def _backend_classes(family: int):
    """(sparse MLA backend class of ``family`` or None, the drafter's FLASH_ATTN class)."""
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.attention.backends.mla import flashinfer_mla_sparse as fims
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm90 import (
        FlashInferMLASparseSM90Backend,
    )

    mla = {100: fims.FlashInferMLASparseTRTLLMBackend,
           120: fims.FlashInferMLASparseSM120Backend,
           90: FlashInferMLASparseSM90Backend}.get(family)
    return mla, FlashAttentionBackend


def register_layers(inputs: GeometryInputs, cfg, kind: str, hf, num_spec: int,
                    with_drafter: bool) -> None:
    """Put the model's (and, ``with_drafter``, the drafter's) layers in ``cfg``'s
    static forward context, in vLLM's registration order."""
    from vllm.config import set_current_vllm_config

    drafter = inputs.drafter_config if with_drafter else None
    ctx = cfg.compilation_config.static_forward_context
    ctx.clear()
    mla_cls, fa_cls = _backend_classes(inputs.capability_family)
    with set_current_vllm_config(cfg):
        if kind == "glm5next":
            _glm5next_layers(inputs, cfg, hf, ctx, num_spec, mla_cls)
        elif kind == "kimi_linear":
            _kimi_layers(inputs, cfg, hf, ctx, num_spec)
        elif kind == "qwen3":
            _qwen3_layers(inputs, cfg, hf, ctx, fa_cls)
        else:
            _qwen3_next_layers(inputs, cfg, hf, ctx, num_spec, fa_cls)
        if drafter is not None:
            _drafter_layers(inputs, cfg, drafter, ctx, fa_cls)


def _glm5next_layers(inputs: GeometryInputs, cfg, hf, ctx, num_spec: int, mla_cls) -> None:
    """Glm5NextModel's layers: KDA at ``model.layers.{i}.self_attn``, else the
    sparse indexer and kpool-tail caches and the MLA layer."""
    import torch
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    import_glm5next()
    from vllm.models.glm5next.common.attention import (
        Glm5NextIndexerCache,
        Glm5NextTailCache,
    )
    from vllm.models.glm5next.common.kda import Glm5NextLinearAttention

    tp = inputs.tensor_parallel_size
    mc = cfg.model_config
    cache = cfg.cache_config
    layer_types = list(getattr(hf, "layer_types", None) or [])
    if mla_cls is None:
        raise ValueError(f"no sparse MLA backend for family {inputs.capability_family}")
    model_kv = _sparse_mla_kv_cache_dtype(mla_cls, cache)
    idx_hd = hf.index_head_dim
    for i in range(hf.num_hidden_layers):
        p = f"model.layers.{i}.self_attn"
        lt = layer_types[i]
        if lt == "linear_attention":
            ctx[p] = bare_layer(
                Glm5NextLinearAttention, prefix=p, tp_size=tp,
                num_heads=hf.linear_num_heads, head_dim=hf.linear_head_dim,
                conv_size=hf.linear_conv_kernel_dim, num_spec=num_spec,
                model_config=mc, cache_config=cache, vllm_config=cfg,
                kda_prefill_backend="triton", _checkpoint_alignment=None)
            continue
        Glm5NextIndexerCache(head_dim=idx_hd + idx_hd // 128 * 4, dtype=torch.uint8,
                             prefix=p + ".indexer.k_cache", cache_config=cache,
                             index_kpool=hf.index_kpool)
        Glm5NextTailCache(head_dim=idx_hd, dtype=torch.bfloat16,
                          prefix=p + ".indexer.tail_cache", cache_config=cache,
                          index_kpool=hf.index_kpool)
        ctx[p + ".mla_attn"] = bare_layer(
            MLAAttention, layer_name=p + ".mla_attn", kv_cache_dtype=model_kv,
            head_size=hf.kv_lora_rank + hf.qk_rope_head_dim, sliding_window=None,
            topk_buffer_width=None, indexer=object(),
            non_causal_multi_token_decode=False, attn_backend=mla_cls,
            kv_sharing_target_layer_name=None)


def _qwen3_next_layers(inputs: GeometryInputs, cfg, hf, ctx, num_spec: int, fa_cls) -> None:
    """Qwen3NextModel's layers: GDN at ``model.layers.{i}.linear_attn``, else
    full attention at ``model.layers.{i}.self_attn.attn``."""
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
        QwenGatedDeltaNetAttention,
    )
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

    tp = inputs.tensor_parallel_size
    mc = cfg.model_config
    cache = cfg.cache_config
    model_kv = cache.cache_dtype
    layer_types = list(getattr(hf, "layer_types", None) or [])
    if not layer_types:
        interval = getattr(hf, "full_attention_interval", 4)
        layer_types = ["linear_attention" if (i + 1) % interval else "full_attention"
                       for i in range(hf.num_hidden_layers)]
    hd = mc.get_head_size()
    if "full_attention" in layer_types:  # Qwen3NextAttention.__init__
        assert hf.num_attention_heads % tp == 0
        kv = hf.num_key_value_heads
        assert kv % tp == 0 if kv >= tp else tp % kv == 0
    for i in range(hf.num_hidden_layers):
        p = f"model.layers.{i}"
        if layer_types[i] == "linear_attention":
            ctx[p + ".linear_attn"] = bare_layer(
                QwenGatedDeltaNetAttention, prefix=p + ".linear_attn", tp_size=tp,
                num_k_heads=hf.linear_num_key_heads,
                num_v_heads=hf.linear_num_value_heads,
                head_k_dim=hf.linear_key_head_dim, head_v_dim=hf.linear_value_head_dim,
                conv_kernel_size=hf.linear_conv_kernel_dim, num_spec=num_spec,
                model_config=mc, cache_config=cache, vllm_config=cfg,
                _checkpoint_alignment=None)
        else:
            ctx[p + ".self_attn.attn"] = _attention(
                fa_cls, p + ".self_attn.attn", mc.get_num_kv_heads(cfg.parallel_config), hd,
                model_kv, kv_cache_dtype_str_to_dtype(model_kv, mc), None, False)


def _qwen3_layers(inputs: GeometryInputs, cfg, hf, ctx, fa_cls) -> None:
    """Qwen3Model's layers: full attention at ``model.layers.{i}.self_attn.attn``, on
    FLASH_ATTN for a GPU family and on vLLM's CPU backend for ``CPU_FAMILY``."""
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

    backend = fa_cls
    if inputs.capability_family == B.CPU_FAMILY:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        backend = CPUAttentionBackend
    tp = inputs.tensor_parallel_size
    mc = cfg.model_config
    model_kv = cfg.cache_config.cache_dtype
    assert hf.num_attention_heads % tp == 0  # Qwen3Attention.__init__
    kv = hf.num_key_value_heads
    assert kv % tp == 0 if kv >= tp else tp % kv == 0
    for i in range(hf.num_hidden_layers):
        name = f"model.layers.{i}.self_attn.attn"
        ctx[name] = _attention(backend, name, mc.get_num_kv_heads(cfg.parallel_config), mc.get_head_size(),
                               model_kv, kv_cache_dtype_str_to_dtype(model_kv, mc), None, False)


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
            "configuration. Reason: ['kv_cache_dtype not supported']")
    hd = drafter.get("head_dim") or drafter["hidden_size"] // heads
    for i, window in enumerate(drafter_sliding_windows(drafter)):
        name = f"drafter.model.layers.{i}.self_attn.attn"
        ctx[name] = _attention(
            fa_cls, name, max(1, total_kv // inputs.tensor_parallel_size), hd, d_kv_str,
            kv_cache_dtype_str_to_dtype(d_kv_str, cfg.model_config), window, True)


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


def _sparse_mla_kv_cache_dtype(mla_cls, cache) -> str:
    """What ``MLAAttention.__init__`` does with the cache dtype for a sparse
    MLA layer: the backend must take it (``validate_configuration``'s dtype
    test; on SM12x no other sparse backend is listed), then
    ``_canonicalize_sparse_mla_kv_cache_dtype`` may change it and the layer
    writes the result back to the cache config."""
    from vllm.model_executor.layers.attention.mla_attention import (
        _canonicalize_sparse_mla_kv_cache_dtype,
    )

    requested = cache.cache_dtype
    if requested not in mla_cls.supported_kv_cache_dtypes:
        raise ValueError(f"No valid attention backend found: {mla_cls.get_name()} does not "
                         f"take kv_cache_dtype {requested!r}")
    canonical = _canonicalize_sparse_mla_kv_cache_dtype(mla_cls, requested)
    if canonical != requested:
        cache.cache_dtype = canonical
    return canonical


def _kimi_mla_backend(inputs: GeometryInputs, hf, kv_str: str):
    """The dense MLA backend class for the family (same table as
    geometry/backends.py::dense_mla_backend)."""
    name = B.dense_mla_backend(inputs.capability_family, kv_str, hf.qk_nope_head_dim,
                                 hf.kv_lora_rank + hf.qk_rope_head_dim).name
    module, clsname = {
        "FLASHINFER_MLA": ("flashinfer_mla", "FlashInferMLABackend"),
        "FLASH_ATTN_MLA": ("flashattn_mla", "FlashAttnMLABackend"),
        "FLASHMLA": ("flashmla", "FlashMLABackend"),
        "TRITON_MLA": ("triton_mla", "TritonMLABackend"),
    }[name]
    cls = getattr(import_kernel_module(f"vllm.v1.attention.backends.mla.{module}"), clsname)
    assert cls.get_name() == name
    return cls


def _kimi_layers(inputs: GeometryInputs, cfg, hf, ctx, num_spec: int) -> None:
    """KimiLinearModel's attention layers (vllm/models/kimi_k3/nvidia/model.py,
    KimiDecoderLayer): KDA iff ``hf.is_kda_layer(i)``, else the model's own
    dense ``MultiHeadLatentAttention`` (nvidia/mla.py), both at
    ``model.layers.{i}.self_attn``.  Constructors are skipped; the attributes
    their ``get_kv_cache_spec`` reads are set as the constructors would."""
    from vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn import (
        KimiGatedDeltaNetAttention,
    )
    from vllm.models.kimi_k3.nvidia.mla import MultiHeadLatentAttention

    tp = inputs.tensor_parallel_size
    mc = cfg.model_config
    model_kv = cfg.cache_config.cache_dtype
    lac = hf.linear_attn_config
    mla_cls = None
    for i in range(hf.num_hidden_layers):
        p = f"model.layers.{i}.self_attn"
        if hf.is_kda_layer(i):
            assert lac["num_heads"] % tp == 0  # as in KimiGatedDeltaNetAttention.__init__
            ctx[p] = bare_layer(
                KimiGatedDeltaNetAttention, prefix=p, tp_size=tp,
                num_heads=lac["num_heads"], head_dim=lac["head_dim"],
                conv_size=lac["short_conv_kernel_size"], num_spec=num_spec,
                model_config=mc, cache_config=cfg.cache_config, vllm_config=cfg,
                speculative_config=cfg.speculative_config, _checkpoint_alignment=None)
            continue
        assert hf.mla_use_nope, "Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only"
        if mla_cls is None:
            mla_cls = _kimi_mla_backend(inputs, hf, model_kv)
        ctx[p] = bare_layer(
            MultiHeadLatentAttention, layer_name=p, kv_cache_dtype=model_kv,
            head_size=hf.kv_lora_rank + hf.qk_rope_head_dim,
            non_causal_multi_token_decode=False, attn_backend=mla_cls,
            kv_sharing_target_layer_name=None, quant_config=None)


def _attention(backend, name, kv_heads, head_size, kv_str, kv_dtype, window, is_draft):
    """A decoder ``Attention`` layer (the drafter's, or a full-attention target layer)."""
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.v1.attention.backend import AttentionType

    return bare_layer(Attention, layer_name=name, attn_type=AttentionType.DECODER,
                      kv_cache_dtype=kv_str, kv_cache_torch_dtype=kv_dtype,
                      sliding_window=window, attn_backend=backend, num_kv_heads=kv_heads,
                      head_size=head_size, head_size_v=head_size,
                      kv_sharing_target_layer_name=None, is_draft_layer=is_draft)
