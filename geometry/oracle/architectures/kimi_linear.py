"""Kimi Linear (``KimiLinearForCausalLM``) from vLLM's own classes: KDA and dense NoPE MLA layers."""

from __future__ import annotations

from geometry.model.inputs import GeometryInputs
from geometry.oracle.architecture import OracleArchitecture
from geometry.oracle.layer_objects import bare_layer
from geometry.oracle.model_config_stand_in import ModelConfigStandIn
from geometry.oracle.target_backends import selected_mla_class


def hf_config_class():
    from vllm.transformers_utils.configs.kimi_linear import KimiLinearConfig

    return KimiLinearConfig


def model_config(hf, architecture: str, dtype, max_model_len: int) -> ModelConfigStandIn:
    head_size = hf.kv_lora_rank + hf.qk_rope_head_dim  # ModelArchConfigConvertor (MLA)
    return ModelConfigStandIn(hf, architecture, dtype, max_model_len, True, head_size, 1)


def register_layers(inputs: GeometryInputs, cfg, hf, ctx, num_spec: int) -> None:
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
                KimiGatedDeltaNetAttention,
                prefix=p,
                tp_size=tp,
                num_heads=lac["num_heads"],
                head_dim=lac["head_dim"],
                conv_size=lac["short_conv_kernel_size"],
                num_spec=num_spec,
                model_config=mc,
                cache_config=cfg.cache_config,
                vllm_config=cfg,
                speculative_config=cfg.speculative_config,
                _checkpoint_alignment=None,
            )
            continue
        assert hf.mla_use_nope, "Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only"
        if mla_cls is None:
            mla_cls = selected_mla_class(inputs, cfg, hf, model_kv, use_sparse=False)
        ctx[p] = bare_layer(
            MultiHeadLatentAttention,
            layer_name=p,
            kv_cache_dtype=model_kv,
            head_size=hf.kv_lora_rank + hf.qk_rope_head_dim,
            non_causal_multi_token_decode=False,
            attn_backend=mla_cls,
            kv_sharing_target_layer_name=None,
            quant_config=None,
        )


ORACLE = OracleArchitecture(hf_config_class, model_config, register_layers)
