"""Qwen3-Next (``Qwen3NextForCausalLM``) from vLLM's own classes: GDN and full-attention layers."""

from __future__ import annotations

from geometry.kv.backends import CPU_FAMILY
from geometry.model.inputs import GeometryInputs
from geometry.oracle.architecture import OracleArchitecture
from geometry.oracle.layer_objects import attention_layer, backend_classes, bare_layer
from geometry.oracle.model_config_stand_in import ModelConfigStandIn
from geometry.oracle.target_backends import target_backend_class


def hf_config_class():
    from transformers import Qwen3NextConfig

    return Qwen3NextConfig


def model_config(hf, architecture: str, dtype, max_model_len: int) -> ModelConfigStandIn:
    hd = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    return ModelConfigStandIn(hf, architecture, dtype, max_model_len, False, hd, hf.num_key_value_heads)


def register_layers(inputs: GeometryInputs, cfg, hf, ctx, num_spec: int) -> None:
    """Qwen3NextModel's layers: GDN at ``model.layers.{i}.linear_attn``, else
    full attention at ``model.layers.{i}.self_attn.attn`` (vLLM's ``Attention``, constructed, on the
    simulator's backend class; ``Qwen3NextAttention.__init__``'s asserts restated)."""
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
        QwenGatedDeltaNetAttention,
    )

    # vLLM's CPU backend on CPU_FAMILY; on a GPU the simulator's choice (None: vLLM's selector is asked)
    if inputs.capability_family == CPU_FAMILY:
        _, fa_cls = backend_classes(inputs.capability_family)
    else:
        fa_cls = target_backend_class(inputs)
    tp = inputs.tensor_parallel_size
    mc = cfg.model_config
    cache = cfg.cache_config
    layer_types = list(getattr(hf, "layer_types", None) or [])
    if not layer_types:
        interval = getattr(hf, "full_attention_interval", 4)
        layer_types = [
            "linear_attention" if (i + 1) % interval else "full_attention" for i in range(hf.num_hidden_layers)
        ]
    hd = mc.get_head_size()
    if "full_attention" in layer_types:  # Qwen3NextAttention.__init__
        assert hf.num_attention_heads % tp == 0
        kv = hf.num_key_value_heads
        assert kv % tp == 0 if kv >= tp else tp % kv == 0
    for i in range(hf.num_hidden_layers):
        p = f"model.layers.{i}"
        if layer_types[i] == "linear_attention":
            ctx[p + ".linear_attn"] = bare_layer(
                QwenGatedDeltaNetAttention,
                prefix=p + ".linear_attn",
                tp_size=tp,
                num_k_heads=hf.linear_num_key_heads,
                num_v_heads=hf.linear_num_value_heads,
                head_k_dim=hf.linear_key_head_dim,
                head_v_dim=hf.linear_value_head_dim,
                conv_kernel_size=hf.linear_conv_kernel_dim,
                num_spec=num_spec,
                model_config=mc,
                cache_config=cache,
                vllm_config=cfg,
                _checkpoint_alignment=None,
            )
        else:  # vLLM's Attention, constructed (layer_objects.attention_layer)
            attention_layer(
                p + ".self_attn.attn",
                mc.get_num_attention_heads(cfg.parallel_config),
                mc.get_num_kv_heads(cfg.parallel_config),
                hd,
                cache,
                None,
                mc.dtype,
                fa_cls,
            )


ORACLE = OracleArchitecture(hf_config_class, model_config, register_layers)
