"""GLM-5.3 (``Glm5NextForCausalLM``) from vLLM's own classes: its config class, model
config, config hook and layers (KDA, sparse indexer and kpool-tail caches, MLA)."""

from __future__ import annotations

from geometry.model.inputs import GeometryInputs
from geometry.oracle.architecture import OracleArchitecture
from geometry.oracle.cpu_shims import import_glm5next, patched
from geometry.oracle.layer_objects import backend_classes, bare_layer, model_parallel_group
from geometry.oracle.model_config_stand_in import ModelConfigStandIn
from geometry.oracle.target_backends import selected_mla_class


def hf_config_class():
    from transformers import Glm5NextTextConfig

    return Glm5NextTextConfig


def model_config(hf, architecture: str, dtype, max_model_len: int) -> ModelConfigStandIn:
    return ModelConfigStandIn(hf, architecture, dtype, max_model_len, True, hf.kv_lora_rank + hf.qk_rope_head_dim, 1)


def verify(cfg) -> None:
    """``Glm5NextModelConfig.verify_and_update_config``, as on a CUDA platform."""
    from vllm.model_executor.models.config import Glm5NextModelConfig
    from vllm.platforms import current_platform

    with patched(type(current_platform), "is_cuda", lambda self: True):
        Glm5NextModelConfig.verify_and_update_config(cfg)


def kda_prefill_backend(hf, mc) -> str:
    """The KDA prefill kernel vLLM picks on the serving GPU: its own ``_resolve_kda_prefill_backend``
    (``additional_config`` without ``kda_prefill_backend``: "auto"), asked on a CUDA platform of the
    serving family's capability (the serving platform is an unspecified one: ``is_cuda()`` False)."""
    from vllm.models.glm5next.common.kda import _resolve_kda_prefill_backend
    from vllm.platforms import current_platform

    with patched(type(current_platform), "is_cuda", lambda self: True):
        return _resolve_kda_prefill_backend("auto", hf.linear_head_dim, mc.dtype, hf.linear_lower_bound)


def register_layers(inputs: GeometryInputs, cfg, hf, ctx, num_spec: int) -> None:
    """Glm5NextModel's layers: KDA at ``model.layers.{i}.self_attn``, else the
    sparse indexer and kpool-tail caches (vLLM's ``Indexer``, constructed on the meta device) and
    the MLA layer (KDA and MLA: ``bare_layer``, their constructors need the served TP group and
    CUDA kernels)."""
    import torch
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    import_glm5next()
    from vllm.models.glm5next.common.attention import Indexer
    from vllm.models.glm5next.common.kda import Glm5NextLinearAttention

    family_cls, _ = backend_classes(inputs.capability_family)
    tp = inputs.tensor_parallel_size
    mc = cfg.model_config
    cache = cfg.cache_config
    layer_types = list(getattr(hf, "layer_types", None) or [])
    if family_cls is None:
        raise ValueError(f"no sparse MLA backend for family {inputs.capability_family}")
    if inputs.capability_family == 120:  # the only sparse candidate there: its dtype test first
        check_sparse_mla_kv_cache_dtype(family_cls, cache.cache_dtype)
    mla_cls = selected_mla_class(inputs, cfg, hf, cache.cache_dtype, use_sparse=True)
    model_kv = sparse_mla_kv_cache_dtype(mla_cls, cache)
    # FlashKDA adds one prefill-checkpoint block per request to each KDA spec (get_kv_cache_spec).
    kda_backend = kda_prefill_backend(hf, mc)
    model_parallel_group()
    for i in range(hf.num_hidden_layers):
        p = f"model.layers.{i}.self_attn"
        lt = layer_types[i]
        if lt == "linear_attention":
            ctx[p] = bare_layer(
                Glm5NextLinearAttention,
                prefix=p,
                tp_size=tp,
                num_heads=hf.linear_num_heads,
                head_dim=hf.linear_head_dim,
                conv_size=hf.linear_conv_kernel_dim,
                num_spec=num_spec,
                model_config=mc,
                cache_config=cache,
                vllm_config=cfg,
                kda_prefill_backend=kda_backend,
                _checkpoint_alignment=None,
            )
            continue
        # Glm5NextAttention.__init__ (v32: index_topk set): vLLM's own Indexer, whose constructor makes
        # the sparse-indexer K cache (its head size from the indexer's own quantisation) and the
        # kpool tail cache, both registered under ``{p}.indexer``. Its linear layers are replicated
        # (no TP split), so a TP group of one builds the same module as the served TP.
        assert hf.q_lora_rank is not None
        with torch.device("meta"):
            Indexer(cfg, hf, hf.hidden_size, hf.q_lora_rank, None, cache, None, f"{p}.indexer")
        ctx[p + ".mla_attn"] = bare_layer(
            MLAAttention,
            layer_name=p + ".mla_attn",
            kv_cache_dtype=model_kv,
            head_size=hf.kv_lora_rank + hf.qk_rope_head_dim,
            sliding_window=None,
            topk_buffer_width=None,
            indexer=object(),
            non_causal_multi_token_decode=False,
            attn_backend=mla_cls,
            kv_sharing_target_layer_name=None,
            # The backend's implementation, whose get_fp8_ds_mla_row_bytes sizes an fp8_ds_mla row
            # where the release asks it (its constructor, like the layer's, is skipped).
            impl=bare_layer(mla_cls.get_impl_cls(), kv_lora_rank=hf.kv_lora_rank, qk_rope_head_dim=hf.qk_rope_head_dim),
        )


def sparse_mla_kv_cache_dtype(mla_cls, cache) -> str:
    """What ``MLAAttention.__init__`` does with the cache dtype for a sparse
    MLA layer: the backend must take it (``validate_configuration``'s dtype
    test; on SM12x no other sparse backend is listed), then
    ``_canonicalize_sparse_mla_kv_cache_dtype`` may change it and the layer
    writes the result back to the cache config."""
    from vllm.model_executor.layers.attention.mla_attention import (
        _canonicalize_sparse_mla_kv_cache_dtype,
    )

    requested = cache.cache_dtype
    check_sparse_mla_kv_cache_dtype(mla_cls, requested)
    canonical = _canonicalize_sparse_mla_kv_cache_dtype(mla_cls, requested)
    if canonical != requested:
        cache.cache_dtype = canonical
    return canonical


def check_sparse_mla_kv_cache_dtype(mla_cls, requested: str) -> None:
    """``validate_configuration``'s dtype test of the sparse MLA backend (ValueError: it does not take it)."""
    if requested not in mla_cls.supported_kv_cache_dtypes:
        raise ValueError(
            f"No valid attention backend found: {mla_cls.get_name()} does not take kv_cache_dtype {requested!r}"
        )


ORACLE = OracleArchitecture(hf_config_class, model_config, register_layers, verify)
