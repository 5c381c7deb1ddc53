"""Qwen3 (``Qwen3ForCausalLM``): a dense target, every layer full attention (stdlib only).

On a GPU family its layers run FLASH_ATTN (as Qwen3-Next's attention layers do); on
``CPU_FAMILY`` (no GPU) vLLM's CPU platform runs them on CPU_ATTN. No mamba state, so
no hybrid alignment: the block is the backend's preferred (or the one given).
"""

from __future__ import annotations

from typing import Callable, Mapping

from geometry.image_contract import Role
from geometry.kv.kv_spec import FullAttentionSpec, SimulatedError
from geometry.kv.units import DTYPE_BYTES
from geometry.model.architecture import Architecture
from geometry.model.config_reader import ConfigReader
from geometry.model.parts import (
    Layer,
    Target,
    TargetSettings,
    attention_builder,
    full_attention_backend,
    kv_heads_per_rank,
    required,
)


def build_target(s: TargetSettings) -> Target:
    tc, tp = s.tc, s.tensor_parallel_size
    heads = int(required(tc, "num_attention_heads"))
    head_size = int(required(tc, "head_dim"))
    backend = full_attention_backend(s, head_size)
    if heads % tp:  # Qwen3Attention.__init__ (and Qwen3MoeAttention's)
        raise SimulatedError("AssertionError", "num_attention_heads not divisible by TP")
    kv_heads = kv_heads_per_rank(int(required(tc, "num_key_value_heads")), tp, "num_key_value_heads")
    t_dtype = s.kv_storage_dtype
    spec = FullAttentionSpec(
        block_size=0,
        num_kv_heads=kv_heads,
        head_size=head_size,
        head_size_v=head_size,
        dtype_bytes=DTYPE_BYTES[t_dtype],
        dtype=t_dtype,
    )
    attn = attention_builder(spec, backend)
    layers = tuple(
        Layer(f"model.layers.{i}.self_attn.attn", Role.TARGET, "attention", backend, attn) for i in range(s.num_layers)
    )
    return Target(layers, use_mla=False, head_size=head_size, num_kv_heads=kv_heads, mamba_page=0)


def full_attention_check(model: str, if_missing: Mapping[str, str]) -> Callable[[ConfigReader, int], None]:
    """The config checks of a target whose every layer is Qwen3's full attention (``model`` names it in the
    messages): ``if_missing`` says what vLLM would take for a missing num_key_value_heads or head_dim."""

    def check(r: ConfigReader, n_layers: int) -> None:
        heads = r.integer("num_attention_heads")
        for key in ("num_key_value_heads", "head_dim"):
            if key not in r.cfg:
                raise r.fail(
                    key, f"required field is missing (vLLM would take {if_missing[key]}, which the gate does not model)"
                )
        kv_heads = r.integer("num_key_value_heads")
        if heads % kv_heads:
            raise r.fail("num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}")
        r.integer("head_dim")
        if r.cfg.get("use_sliding_window") is True:
            raise r.fail("use_sliding_window", f"sliding-window layers of {model} are not modelled")
        r.layer_types(n_layers, ("full_attention",))

    return check


# transformers' Qwen3Config fills a missing one with its defaults (8 KV heads, head_dim 128).
QWEN3_DEFAULT = "transformers' Qwen3Config default"
check = full_attention_check("a dense Qwen3", {"num_key_value_heads": QWEN3_DEFAULT, "head_dim": QWEN3_DEFAULT})


ARCHITECTURE = Architecture(
    kind="qwen3",
    hf_architecture="Qwen3ForCausalLM",
    model_types=("qwen3",),
    layer_types=("full_attention",),
    hybrid=False,
    check=check,
    build_target=build_target,
    runs_on_cpu=True,
)
