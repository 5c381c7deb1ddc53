"""Kimi Linear (``KimiLinearForCausalLM``, vllm/models/kimi_k3): layer i is KDA
iff i + 1 is in ``linear_attn_config["kda_layers"]``, otherwise dense NoPE
MLA; both register as ``model.layers.{i}.self_attn`` (stdlib only)."""

from __future__ import annotations

from typing import Mapping

from geometry.errors import BadInput
from geometry.image_contract import Role
from geometry.kv import backends as B
from geometry.kv import target_backend
from geometry.kv.kv_spec import MLAAttentionSpec, SimulatedError
from geometry.kv.units import DTYPE_BYTES
from geometry.model.architecture import Architecture
from geometry.model.config_reader import NO_ATTENTION, ConfigReader
from geometry.model.parts import Layer, Target, TargetSettings, attention_builder, kda_state, mamba_builder, required


def build_target(s: TargetSettings) -> Target:
    tc, tp = s.tc, s.tensor_parallel_size
    lac = tc.get("linear_attn_config")
    if not isinstance(lac, Mapping):
        raise BadInput("Kimi Linear config lacks 'linear_attn_config'")
    kda_layers = lac.get("kda_layers")
    if kda_layers is None or lac.get("full_attn_layers") is None:
        raise BadInput("linear_attn_config needs 'kda_layers' and 'full_attn_layers'")
    if not kda_layers:
        raise BadInput("Kimi Linear without KDA layers (not hybrid) is not modelled")
    if lac.get("use_full_rank_gate"):
        raise BadInput("Kimi-K3 full-rank-gate KDA is not modelled")
    kda_set = {int(x) for x in kda_layers}
    for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"):
        required(tc, key)
    head_size = int(tc["kv_lora_rank"]) + int(tc["qk_rope_head_dim"])
    state = kda_state(
        int(required(lac, "num_heads")),
        int(required(lac, "head_dim")),
        int(lac.get("short_conv_kernel_size", 4)),
        tp,
        s.num_spec,
        s.model_dtype,
    )
    has_mla = any(i + 1 not in kda_set for i in range(s.num_layers))
    if has_mla and not tc.get("mla_use_nope"):
        raise SimulatedError("AssertionError", "Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only")
    mla_backend = target_backend.mla_backend(
        target_backend.mla_ask(tc, s.capability_family, s.kv_cache_dtype, s.user_block_size, tp, use_sparse=False)
    )
    t_dtype = s.kv_storage_dtype
    latent = MLAAttentionSpec(
        block_size=0,
        num_kv_heads=1,
        head_size=head_size,
        head_size_v=0,
        dtype_bytes=DTYPE_BYTES[t_dtype],
        dtype=t_dtype,
    )
    kda = mamba_builder(state, s.max_model_len)
    mla = attention_builder(latent, mla_backend)
    layers = []
    for i in range(s.num_layers):
        p = f"model.layers.{i}.self_attn"
        if i + 1 in kda_set:
            layers.append(Layer(p, Role.TARGET, "kda", B.SSM, kda))
        else:
            layers.append(Layer(p, Role.TARGET, "mla_latent", mla_backend, mla))
    return Target(tuple(layers), use_mla=True, head_size=head_size, num_kv_heads=1, mamba_page=state.bytes)


def check(r: ConfigReader, n_layers: int) -> None:
    for key in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
        r.integer(key)
    r.integer("qk_rope_head_dim", minimum=0)
    lac = r.mapping("linear_attn_config")
    lac.integer("num_heads")
    lac.integer("head_dim")
    lac.integer("short_conv_kernel_size", required=False)
    kda_layers = lac.int_list("kda_layers", minimum=1, maximum=n_layers)
    # vLLM (KimiLinearConfig.is_kda_layer) reads a layer's kind from kda_layers alone: a
    # layer not listed there is MLA, whatever full_attn_layers says (it is only required).
    lac.int_list("full_attn_layers", minimum=1, maximum=n_layers)
    if set(kda_layers) >= set(range(1, n_layers + 1)):
        raise lac.fail(
            "kda_layers",
            f"lists all {n_layers} layers, so none is attention (a layer's kind "
            f"is read from kda_layers alone): {NO_ATTENTION}",
        )


ARCHITECTURE = Architecture(
    kind="kimi_linear",
    hf_architecture="KimiLinearForCausalLM",
    model_types=("kimi_linear",),
    layer_types=(),
    hybrid=True,
    check=check,
    build_target=build_target,
)
