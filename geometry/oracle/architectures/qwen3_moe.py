"""Qwen3-MoE (``Qwen3MoeForCausalLM``) from vLLM's own classes: full-attention layers only.

``Qwen3MoeAttention`` builds vLLM's ``Attention`` as ``Qwen3Attention`` does (same heads, same
asserts, same ``model.layers.{i}.self_attn.attn`` names, no sliding window), so its layers are
registered by qwen3's ``register_layers``; the MoE MLP holds no KV cache."""

from __future__ import annotations

from geometry.oracle.architecture import OracleArchitecture
from geometry.oracle.architectures.qwen3 import register_layers
from geometry.oracle.model_config_stand_in import ModelConfigStandIn


def hf_config_class():
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig


def model_config(hf, architecture: str, dtype, max_model_len: int) -> ModelConfigStandIn:
    # ModelArchConfigConvertorBase.get_head_size: head_dim if set and positive, else
    # hidden_size // num_attention_heads (Qwen3MoeConfig has no head_dim of its own).
    head_dim = getattr(hf, "head_dim", None)
    head_size = head_dim if head_dim is not None and head_dim > 0 else hf.hidden_size // hf.num_attention_heads
    return ModelConfigStandIn(
        hf, architecture, dtype, max_model_len, False, head_size, hf.num_key_value_heads, is_hybrid=False
    )


ORACLE = OracleArchitecture(hf_config_class, model_config, register_layers)
