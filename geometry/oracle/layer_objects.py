"""Layer objects vLLM's planning collects specs from, built without their CUDA kernels.

Every layer class's own ``get_kv_cache_spec`` runs (KDA/GDN, MLA, the GLM
sparse-indexer and kpool-tail caches, the drafter's ``Attention``); layers whose
constructors build CUDA kernels (MLA, KDA/GDN, ``Attention``) are created
without their constructors and given the attributes their ``get_kv_cache_spec``
reads (``bare_layer``); the GLM indexer and kpool-tail caches are constructed
normally.  The backend *choice* (which needs libcuda in vLLM) is the
simulator's table (geometry/backends.py), mapped to vLLM's classes here.
"""

from __future__ import annotations


def bare_layer(cls, **attrs):
    """An instance whose constructor (which builds CUDA kernels) is skipped."""
    import torch.nn as nn

    obj = cls.__new__(cls)
    if isinstance(obj, nn.Module):
        nn.Module.__init__(obj)
    for k, v in attrs.items():
        object.__setattr__(obj, k, v)
    return obj


def backend_classes(family: int):
    """(sparse MLA backend class of ``family`` or None, the class of the drafter's and the target's
    full-attention layers: FLASH_ATTN on a GPU family, CPU_ATTN on vLLM's CPU platform)."""
    from ..backends import CPU_FAMILY

    if family == CPU_FAMILY:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        return None, CPUAttentionBackend
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.attention.backends.mla import flashinfer_mla_sparse as fims
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm90 import (
        FlashInferMLASparseSM90Backend,
    )

    mla = {
        100: fims.FlashInferMLASparseTRTLLMBackend,
        120: fims.FlashInferMLASparseSM120Backend,
        90: FlashInferMLASparseSM90Backend,
    }.get(family)
    return mla, FlashAttentionBackend


def attention_layer(backend, name, kv_heads, head_size, kv_str, kv_dtype, window, is_draft):
    """A decoder ``Attention`` layer (the drafter's, or a full-attention target layer)."""
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.v1.attention.backend import AttentionType

    return bare_layer(
        Attention,
        layer_name=name,
        attn_type=AttentionType.DECODER,
        kv_cache_dtype=kv_str,
        kv_cache_torch_dtype=kv_dtype,
        sliding_window=window,
        attn_backend=backend,
        num_kv_heads=kv_heads,
        head_size=head_size,
        head_size_v=head_size,
        kv_sharing_target_layer_name=None,
        is_draft_layer=is_draft,
    )
