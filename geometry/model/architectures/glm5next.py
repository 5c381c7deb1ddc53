"""GLM-5.3 (``Glm5NextForCausalLM``): KDA linear-attention layers and
indexed-attention layers, each of which registers a sparse-indexer key cache,
a kpool tail ring and a sparse MLA latent (stdlib only).

Without ``layer_types`` every fourth layer is indexed attention, the rest KDA."""

from __future__ import annotations

from typing import Any, Mapping

from geometry.errors import BadInput
from geometry.image_contract import Role
from geometry.kv import backends as B
from geometry.kv import target_backend
from geometry.kv.kv_spec import CacheConfig, CircularBufferSpec, KVCacheSpec, MLAAttentionSpec, SimulatedError
from geometry.kv.units import DTYPE_BYTES, cdiv, next_power_of_2
from geometry.model.architecture import Architecture
from geometry.model.config_reader import ConfigReader, require_attention
from geometry.model.parts import (
    Layer,
    SpecBuilder,
    Target,
    TargetSettings,
    attention_builder,
    customize_attention_spec,
    kda_state,
    mamba_builder,
    required,
)

ATTENTION_INTERVAL = 4
# kda_prefill_checkpoint_alignment("flashkda") (vllm/model_executor/layers/mamba/kda_checkpoint.py).
FLASHKDA_CHECKPOINT_ALIGNMENT = 16
LAYER_TYPES = ("linear_attention", "indexed_attention")


def tail_ring_builder(kpool: int, head_dim: int, num_spec: int) -> SpecBuilder:
    """``Glm5NextTailCache``: a ring of ``kpool x next_pow2(ceil((kpool +
    num_spec) / kpool))`` tokens, which the cache block must be a multiple of."""
    ring = kpool * next_power_of_2(cdiv(kpool + num_spec, kpool))

    def build(cache: CacheConfig) -> KVCacheSpec:
        if cache.block_size % ring:
            raise SimulatedError(
                "AssertionError",
                f"Glm5NextTailCache: cache_config.block_size ({cache.block_size}) "
                f"must be a multiple of the tail ring ({ring})",
            )
        return customize_attention_spec(
            B.KPOOL_TAIL,
            CircularBufferSpec(
                block_size=ring,
                num_kv_heads=2,
                head_size=head_dim,
                head_size_v=0,
                dtype_bytes=2,
                dtype="bfloat16",
                dcp_sharded=False,
            ),
        )

    return build


def kda_prefill_backend(tc: Mapping[str, Any], family: int, model_dtype: str) -> str:
    """The KDA layers' prefill kernel as the modelled vLLM release picks it (``_resolve_kda_prefill_backend`` in
    vllm/models/glm5next/common/kda.py, ``additional_config`` without ``kda_prefill_backend``: "auto"):
    FlashKDA on CUDA with compute capability major 9, 10 or 12 (the family is major x 10) for a
    bfloat16 model, KDA head_dim 128 and a bounded gate (``linear_lower_bound``), else Triton."""
    supported = (
        family != B.CPU_FAMILY
        and family // 10 in (9, 10, 12)
        and tc.get("linear_head_dim") == 128
        and model_dtype == "bfloat16"
        and tc.get("linear_lower_bound") is not None
    )
    return "flashkda" if supported else "triton"


def build_target(s: TargetSettings) -> Target:
    tc, tp, family = s.tc, s.tensor_parallel_size, s.capability_family
    layer_types = s.layer_types or tuple(
        "linear_attention" if (i + 1) % ATTENTION_INTERVAL else "indexed_attention" for i in range(s.num_layers)
    )
    head_size = int(required(tc, "kv_lora_rank")) + int(tc.get("qk_rope_head_dim", 0) or 0)
    has_indexer = tc.get("index_topk") is not None
    kpool = int(tc.get("index_kpool", 16))
    idx_hd = int(tc.get("index_head_dim", 128))
    state = kda_state(
        required(tc, "linear_num_heads"),
        required(tc, "linear_head_dim"),
        tc.get("linear_conv_kernel_dim", 4),
        tp,
        s.num_spec,
        s.model_dtype,
    )
    if int(required(tc, "num_attention_heads")) % tp:
        raise SimulatedError("AssertionError", "num_attention_heads must be divisible by world_size")
    if has_indexer and kpool <= 1:
        raise SimulatedError("AssertionError", "Glm5NextIndexerCache expects index_kpool > 1")
    if not has_indexer:
        raise BadInput("GLM-5.3 without a sparse indexer (dense MLA) is not modelled")
    # vLLM's selection (model.resolve_kv_dtypes asked it with the cache dtype before canonicalisation; the
    # canonical one picks the same backend).
    mla_backend = target_backend.mla_backend(
        target_backend.mla_ask(tc, family, s.kv_cache_dtype, s.user_block_size, tp, use_sparse=True)
    )
    idx_backend = B.glm5_indexer_backend(kpool, family)
    t_dtype = s.kv_storage_dtype
    indexer = MLAAttentionSpec(
        block_size=0,
        num_kv_heads=1,
        head_size=idx_hd + idx_hd // 128 * 4,
        head_size_v=0,
        dtype_bytes=1,
        dtype="uint8",
        state_tokens=kpool,
        cache_role="indexer",
    )
    latent = MLAAttentionSpec(
        block_size=0,
        num_kv_heads=1,
        head_size=head_size,
        head_size_v=0,
        dtype_bytes=DTYPE_BYTES[t_dtype],
        dtype=t_dtype,
        content_bytes=(
            B.fp8_ds_mla_row_bytes(
                mla_backend,
                int(required(tc, "kv_lora_rank")),
                int(tc.get("qk_rope_head_dim", 0) or 0),
                s.vllm,
            )
            if s.kv_cache_dtype == "fp8_ds_mla"
            else None
        ),
    )
    kda = mamba_builder(state, s.max_model_len)
    idx = attention_builder(indexer, idx_backend)
    tail = tail_ring_builder(kpool, idx_hd, s.num_spec)
    mla = attention_builder(latent, mla_backend)
    layers = []
    for i in range(s.num_layers):
        p = f"model.layers.{i}.self_attn"
        if layer_types[i] == "linear_attention":
            layers.append(Layer(p, Role.TARGET, "kda", B.SSM, kda))
            continue
        layers += [
            Layer(p + ".indexer.k_cache", Role.TARGET, "sparse_indexer", idx_backend, idx),
            Layer(p + ".indexer.tail_cache", Role.TARGET, "kpool_tail", B.KPOOL_TAIL, tail),
            Layer(p + ".mla_attn", Role.TARGET, "mla_latent", mla_backend, mla),
        ]
    # Glm5NextLinearAttention.get_kv_cache_spec: FlashKDA checkpoints the state inside a prefill chunk
    # (kda_prefill_checkpoint_alignment: 16 tokens), so each KDA spec holds one more block per request in
    # "align" (num_prefill_checkpoint_blocks = 1 where the alignment is not None).
    alignment = FLASHKDA_CHECKPOINT_ALIGNMENT if kda_prefill_backend(tc, family, s.model_dtype) == "flashkda" else None
    return Target(
        tuple(layers),
        use_mla=True,
        head_size=head_size,
        num_kv_heads=1,
        mamba_page=state.bytes,
        prefill_checkpoint_blocks=int(alignment is not None),
        prefill_checkpoint_alignment=alignment,
    )


def check(r: ConfigReader, n_layers: int) -> None:
    r.integer("num_attention_heads")
    r.integer("kv_lora_rank")
    r.integer("qk_rope_head_dim", required=False, allow_null=True, minimum=0)
    r.integer("linear_num_heads")
    r.integer("linear_head_dim")
    r.integer("linear_conv_kernel_dim", required=False)
    r.integer("index_topk", required=False, allow_null=True)
    r.integer("index_kpool", required=False)
    r.integer("index_head_dim", required=False)
    r.layer_types(n_layers, LAYER_TYPES)
    require_attention(r, "indexed_attention", n_layers, ATTENTION_INTERVAL)


def runs_sparse_mla(text: Mapping[str, Any]) -> bool:
    """A sparse indexer (``index_topk``) makes its MLA layers sparse MLA."""
    return text.get("index_topk") is not None


ARCHITECTURE = Architecture(
    kind="glm5next",
    hf_architecture="Glm5NextForCausalLM",
    model_types=("glm5_next", "glm5_next_text"),
    layer_types=LAYER_TYPES,
    hybrid=True,
    check=check,
    build_target=build_target,
    runs_sparse_mla=runs_sparse_mla,
)
