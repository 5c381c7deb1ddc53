"""Qwen3 (``Qwen3ForCausalLM``) from vLLM's own classes: full-attention layers only."""

from __future__ import annotations

from ...inputs import GeometryInputs
from ..architecture import OracleArchitecture
from ..layer_objects import attention_layer, backend_classes
from ..model_config_stand_in import ModelConfigStandIn


def hf_config_class():
    from transformers import Qwen3Config

    return Qwen3Config


def model_config(hf, architecture: str, dtype, max_model_len: int) -> ModelConfigStandIn:
    return ModelConfigStandIn(
        hf, architecture, dtype, max_model_len, False, hf.head_dim, hf.num_key_value_heads, is_hybrid=False
    )


def register_layers(inputs: GeometryInputs, cfg, hf, ctx, num_spec: int) -> None:
    """Qwen3Model's layers: full attention at ``model.layers.{i}.self_attn.attn``, on
    FLASH_ATTN for a GPU family and on vLLM's CPU backend for ``CPU_FAMILY``."""
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

    _, backend = backend_classes(inputs.capability_family)
    tp = inputs.tensor_parallel_size
    mc = cfg.model_config
    model_kv = cfg.cache_config.cache_dtype
    assert hf.num_attention_heads % tp == 0  # Qwen3Attention.__init__
    kv = hf.num_key_value_heads
    assert kv % tp == 0 if kv >= tp else tp % kv == 0
    for i in range(hf.num_hidden_layers):
        name = f"model.layers.{i}.self_attn.attn"
        ctx[name] = attention_layer(
            backend,
            name,
            mc.get_num_kv_heads(cfg.parallel_config),
            mc.get_head_size(),
            model_kv,
            kv_cache_dtype_str_to_dtype(model_kv, mc),
            None,
            False,
        )


ORACLE = OracleArchitecture(hf_config_class, model_config, register_layers)
