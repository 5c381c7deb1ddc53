"""The backend classes the oracle builds the target's attention and MLA layers on: the simulator's choice
(geometry/kv/target_backend.py, vLLM's selection as the simulator models it; tests/agreement/
test_backend_agreement.py holds it to vLLM's own selector), as vLLM's class of that name. Where the simulator
finds no backend valid, the oracle asks vLLM's selector itself, as the layer's constructor does, and its
refusal is the plan's (``None`` here)."""

from __future__ import annotations

from geometry.image_contract import Role
from geometry.kv.kv_spec import SimulatedError
from geometry.model.inputs import GeometryInputs
from geometry.model.model import build_model

_SELECTED_ROLES = ("attention", "mla_latent")


def simulator_choice(inputs: GeometryInputs) -> str | None:
    """The name of the backend the simulator gives the target's attention / MLA layers of ``inputs``; None where
    building the target fails in the simulator (vLLM's selector finds none valid, or a constructor asserts)."""
    try:
        model = build_model(inputs, False, 0)
    except SimulatedError:
        return None
    names = {
        layer.backend.name for layer in model.layers if layer.owner is Role.TARGET and layer.role in _SELECTED_ROLES
    }
    return names.pop() if len(names) == 1 else None


def target_backend_class(inputs: GeometryInputs):
    """vLLM's class of the simulator's choice (``simulator_choice``), or None."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from geometry.oracle.backend_selection import backend_class

    name = simulator_choice(inputs)
    return None if name is None else backend_class(AttentionBackendEnum[name])


def selected_mla_class(inputs: GeometryInputs, cfg, hf, kv_cache_dtype: str, use_sparse: bool):
    """The MLA layer's backend class: the simulator's choice, else what vLLM's selector answers for the
    arguments ``MLAAttention.__init__`` passes it (its ValueError when no candidate is valid)."""
    cls = target_backend_class(inputs)
    if cls is not None:
        return cls
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.attention.selector import get_attn_backend

    mc = cfg.model_config
    with set_current_vllm_config(cfg), set_default_torch_dtype(mc.dtype):
        return get_attn_backend(
            hf.kv_lora_rank + hf.qk_rope_head_dim,
            torch.get_default_dtype(),
            kv_cache_dtype,
            use_mla=True,
            use_sparse=use_sparse,
            num_heads=hf.num_attention_heads // inputs.tensor_parallel_size,
            has_sliding_window=False,
        )
