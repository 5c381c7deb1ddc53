"""Qwen3-MoE (``Qwen3MoeForCausalLM``): every layer full attention, as a dense Qwen3's (stdlib only).

vLLM's ``Qwen3MoeAttention`` reads the same keys as ``Qwen3Attention`` (num_attention_heads,
num_key_value_heads, head_dim), asserts the same head splits and registers its ``Attention`` at
``model.layers.{i}.self_attn.attn`` with no per-layer sliding window; the MoE MLP (num_experts,
decoder_sparse_step, mlp_only_layers) holds no KV cache. So the layers and backends are qwen3's.
What differs is what vLLM would take for a missing key: transformers' ``Qwen3MoeConfig`` has 4 KV
heads by default and no head_dim, for which vLLM takes hidden_size // num_attention_heads.
"""

from __future__ import annotations

from geometry.model.architecture import Architecture
from geometry.model.architectures.qwen3 import build_target, full_attention_check

check = full_attention_check(
    "a Qwen3-MoE",
    {
        "num_key_value_heads": "transformers' Qwen3MoeConfig default",
        "head_dim": "hidden_size // num_attention_heads (Qwen3MoeConfig has no head_dim)",
    },
)


ARCHITECTURE = Architecture(
    kind="qwen3_moe",
    hf_architecture="Qwen3MoeForCausalLM",
    model_types=("qwen3_moe",),
    layer_types=("full_attention",),
    hybrid=False,
    check=check,
    build_target=build_target,
    runs_on_cpu=True,
)
