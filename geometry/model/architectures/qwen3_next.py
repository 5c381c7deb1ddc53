"""Qwen3-Next (``Qwen3NextForCausalLM``): Gated DeltaNet linear-attention
layers and full-attention layers (FLASH_ATTN on a GPU family, CPU_ATTN on vLLM's CPU
platform) (stdlib only).

On the CPU platform (``CPU_FAMILY``) ``CpuPlatform.check_and_update_config`` resets
``mamba_ssm_cache_dtype`` "auto" to float32 on a CPU with AVX512-BF16 ("Reset SSM cache type to
float32 for accelerated GDN mamba backend"): the GDN temporal state is then fp32; on one without
AVX512-BF16 it stays in the model dtype. The gate input says which CPU serves
(``cpu_avx512_bf16``, geometry/model/serving_cpu.py; backends.cpu_ssm_state_dtype)."""

from __future__ import annotations

from geometry.image_contract import Role
from geometry.kv import backends as B
from geometry.kv.kv_spec import FullAttentionSpec, SimulatedError
from geometry.kv.units import DTYPE_BYTES
from geometry.model.architecture import Architecture
from geometry.model.config_reader import ConfigReader, require_attention
from geometry.model.parts import (
    Layer,
    MambaState,
    Target,
    TargetSettings,
    attention_builder,
    full_attention_backend,
    kv_heads_per_rank,
    mamba_builder,
    required,
)

# transformers' Qwen3NextConfig default, which vLLM reads when the config has no num_key_value_heads.
DEFAULT_KV_HEADS = 2
# Without layer_types every full_attention_interval-th layer is full attention (transformers' default 4).
DEFAULT_ATTENTION_INTERVAL = 4
LAYER_TYPES = ("linear_attention", "full_attention")


def gdn_state(tc, tp: int, num_spec: int, model_dtype: str, ssm_dtype: str | None = None) -> MambaState:
    """MambaStateShapeCalculator.gated_delta_net_state_shape; the conv state in the model dtype, the
    temporal state in ``ssm_dtype`` (``mamba_ssm_cache_dtype``; None: "auto", the conv state's)."""
    nk = required(tc, "linear_num_key_heads")
    nv = required(tc, "linear_num_value_heads")
    dk = required(tc, "linear_key_head_dim")
    dv = required(tc, "linear_value_head_dim")
    k = tc.get("linear_conv_kernel_dim", 4)
    conv_dim = dk * nk * 2 + dv * nv
    if conv_dim % tp or nv % tp:
        raise SimulatedError("AssertionError", "GDN dims not divisible by TP")
    conv = (conv_dim // tp, k - 1 + num_spec)
    temporal = (nv // tp, dv, dk)
    ssm_dtype = ssm_dtype or model_dtype
    total = (
        conv[0] * conv[1] * DTYPE_BYTES[model_dtype] + temporal[0] * temporal[1] * temporal[2] * DTYPE_BYTES[ssm_dtype]
    )
    return MambaState((conv, temporal), (model_dtype, ssm_dtype), total)


def build_target(s: TargetSettings) -> Target:
    tc, tp = s.tc, s.tensor_parallel_size
    layer_types = s.layer_types
    if not layer_types:
        interval = int(tc.get("full_attention_interval", DEFAULT_ATTENTION_INTERVAL))
        layer_types = tuple("linear_attention" if (i + 1) % interval else "full_attention" for i in range(s.num_layers))
    heads = int(required(tc, "num_attention_heads"))
    kvh = int(tc.get("num_key_value_heads", DEFAULT_KV_HEADS))
    head_size = int(required(tc, "head_dim"))
    backend = full_attention_backend(s, head_size)
    if heads % tp:  # Qwen3NextAttention.__init__
        raise SimulatedError("AssertionError", "num_attention_heads not divisible by TP")
    kv_heads = kv_heads_per_rank(kvh, tp, "num_key_value_heads")
    ssm_dtype = B.cpu_ssm_state_dtype(s.cpu_avx512_bf16) if s.capability_family == B.CPU_FAMILY else None
    state = gdn_state(tc, tp, s.num_spec, s.model_dtype, ssm_dtype)
    t_dtype = s.kv_storage_dtype
    spec = FullAttentionSpec(
        block_size=0,
        num_kv_heads=kv_heads,
        head_size=head_size,
        head_size_v=head_size,
        dtype_bytes=DTYPE_BYTES[t_dtype],
        dtype=t_dtype,
    )
    gdn = mamba_builder(state, s.max_model_len)
    attn = attention_builder(spec, backend)
    layers = []
    for i in range(s.num_layers):
        p = f"model.layers.{i}"
        if layer_types[i] == "linear_attention":
            layers.append(Layer(p + ".linear_attn", Role.TARGET, "gdn", B.SSM, gdn))
        else:
            layers.append(Layer(p + ".self_attn.attn", Role.TARGET, "attention", backend, attn))
    return Target(tuple(layers), use_mla=False, head_size=head_size, num_kv_heads=kv_heads, mamba_page=state.bytes)


def check(r: ConfigReader, n_layers: int) -> None:
    r.integer("num_attention_heads")
    r.integer("num_key_value_heads", required=False)
    if "head_dim" not in r.cfg:
        # Not hidden_size // num_attention_heads: transformers fills in its default.
        raise r.fail(
            "head_dim",
            "required field is missing (transformers' Qwen3NextConfig then takes 256, "
            "whose FLASH_ATTN pages are not modelled)",
        )
    r.integer("head_dim")
    for key in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim"):
        r.integer(key)
    r.integer("linear_conv_kernel_dim", required=False)
    interval = r.integer("full_attention_interval", required=False)
    r.layer_types(n_layers, LAYER_TYPES)
    require_attention(r, "full_attention", n_layers, interval or DEFAULT_ATTENTION_INTERVAL)


ARCHITECTURE = Architecture(
    kind="qwen3_next",
    hf_architecture="Qwen3NextForCausalLM",
    model_types=("qwen3_next",),
    layer_types=LAYER_TYPES,
    hybrid=True,
    check=check,
    build_target=build_target,
    # GDN layers export a prefill checkpoint alignment of 64 when vLLM picks FlashInfer's GDN
    # prefill kernel, which depends on the CUDA runtime and FlashInfer build of the image.
    align_mode_not_modelled=(
        "mamba_cache_mode 'align' for Qwen3-Next (GDN) targets is not modelled (the prefill checkpoint "
        "alignment depends on the GDN prefill kernel vLLM picks at run time)"
    ),
    runs_on_cpu=True,
)
