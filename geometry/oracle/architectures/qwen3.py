"""Qwen3 (``Qwen3ForCausalLM``) from vLLM's own classes: full-attention layers only."""

from __future__ import annotations

from geometry.kv.backends import CPU_FAMILY
from geometry.model.inputs import GeometryInputs
from geometry.oracle.architecture import OracleArchitecture
from geometry.oracle.layer_objects import attention_layer, backend_classes
from geometry.oracle.model_config_stand_in import ModelConfigStandIn
from geometry.oracle.target_backends import target_backend_class


def hf_config_class():
    from transformers import Qwen3Config

    return Qwen3Config


def model_config(hf, architecture: str, dtype, max_model_len: int) -> ModelConfigStandIn:
    return ModelConfigStandIn(
        hf, architecture, dtype, max_model_len, False, hf.head_dim, hf.num_key_value_heads, is_hybrid=False
    )


def register_layers(inputs: GeometryInputs, cfg, hf, ctx, num_spec: int) -> None:
    """Qwen3Model's layers: vLLM's ``Attention`` at ``model.layers.{i}.self_attn.attn`` (constructed:
    layer_objects.attention_layer), on FLASH_ATTN for a GPU family and on vLLM's CPU backend for
    ``CPU_FAMILY`` (the simulator's table). ``Qwen3Attention.__init__``'s head split and asserts are
    restated (its linear layers need vLLM's TP group of the served size)."""
    # vLLM's CPU backend on CPU_FAMILY; on a GPU the simulator's choice (None: vLLM's selector is asked)
    if inputs.capability_family == CPU_FAMILY:
        _, backend = backend_classes(inputs.capability_family)
    else:
        backend = target_backend_class(inputs)
    tp = inputs.tensor_parallel_size
    mc = cfg.model_config
    assert hf.num_attention_heads % tp == 0  # Qwen3Attention.__init__
    kv = hf.num_key_value_heads
    assert kv % tp == 0 if kv >= tp else tp % kv == 0
    for i in range(hf.num_hidden_layers):
        attention_layer(
            f"model.layers.{i}.self_attn.attn",
            mc.get_num_attention_heads(cfg.parallel_config),
            mc.get_num_kv_heads(cfg.parallel_config),
            mc.get_head_size(),
            cfg.cache_config,
            None,
            mc.dtype,
            backend,
        )


ORACLE = OracleArchitecture(hf_config_class, model_config, register_layers)
