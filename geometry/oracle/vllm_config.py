"""The ``VllmConfig`` vLLM's planning reads, built for a ``GeometryInputs``.

``VllmConfig`` is real, but its ``model_config`` is a small object carrying the
attributes the planning functions read (HF config, dtype, ``use_mla``,
``get_num_kv_heads``, ``get_head_size``, ...) and ``speculative_config`` carries
``method``/``num_speculative_tokens``/``kv_cache_dtype``/``attention_backend``.
The architecture's own ``verify_and_update_config`` hooks then run on it as
``VllmConfig.try_verify_and_update_config`` runs them.
"""

from __future__ import annotations

import types

from ..block_size import DEFAULT_BLOCK_SIZE
from ..inputs import GeometryInputs
from ..model import resolve_model_dtype
from ..model_config import target_kind, text_config
from .cpu_shims import patched


class ModelConfigStandIn:
    """Stand-in for vllm.config.ModelConfig with what the planning reads."""

    def __init__(self, hf, arch: str, dtype, max_model_len: int, use_mla: bool,
                 head_size: int, total_kv_heads: int, is_hybrid: bool = True):
        self.hf_config = hf
        self.hf_text_config = hf
        self.architecture = arch
        self.architectures = [arch]
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.use_mla = use_mla
        self.is_hybrid = is_hybrid
        self.is_mm_prefix_lm = False
        self.is_multimodal_model = False
        self._head_size = head_size
        self._total_kv = total_kv_heads
        self.model = "glm53-geometry-oracle"
        self.rswa_window = None
        self.model_impl = "auto"
        self.runner_type = "generate"
        self.convert_type = "none"

    def get_head_size(self) -> int:
        return self._head_size

    def get_num_kv_heads(self, parallel_config) -> int:
        if self.use_mla:
            return 1
        return max(1, self._total_kv // parallel_config.tensor_parallel_size)

    def get_num_attention_heads(self, parallel_config) -> int:
        return self.hf_text_config.num_attention_heads // parallel_config.tensor_parallel_size


def _hf_config_class(kind: str):
    """The config class vLLM's model code for ``kind`` is written against. The layer
    modules the oracle builds import them from transformers themselves
    (``vllm.models.glm5next.common``, ``qwen_gdn_linear_attn``), so any transformers
    the oracle runs with has them."""
    if kind == "glm5next":
        from transformers import Glm5NextTextConfig

        return Glm5NextTextConfig
    if kind == "kimi_linear":
        from vllm.transformers_utils.configs.kimi_linear import KimiLinearConfig

        return KimiLinearConfig
    if kind == "qwen3":
        from transformers import Qwen3Config

        return Qwen3Config
    from transformers import Qwen3NextConfig

    return Qwen3NextConfig


def _hf_config(kind: str, cfg: dict):
    """The target's text config as vLLM loads it; ValueError naming the class if that
    class refuses it (vLLM could not load the model either)."""
    tc = {k: v for k, v in text_config(cfg).items() if not k.startswith("_")}
    cls = _hf_config_class(kind)
    try:
        return cls(**tc)
    except Exception as exc:  # noqa: BLE001 - transformers' validation errors share no base but Exception
        raise ValueError(f"{cls.__name__} refuses the target config: {' '.join(str(exc).split())}") from exc


def build_vllm_config(inputs: GeometryInputs, with_drafter: bool, num_spec: int):
    """``(vllm_config, kind, hf_config)`` for ``inputs``, after the model's and
    the hybrid models' config hooks; ValueError if vLLM resolves another
    ``mamba_cache_mode`` than the input states."""
    import torch
    from vllm.config import DeviceConfig, VllmConfig

    kind = target_kind(inputs.target_config)
    tc = text_config(inputs.target_config)
    tp = inputs.tensor_parallel_size
    hf = _hf_config(kind, dict(inputs.target_config))
    dtype = getattr(torch, resolve_model_dtype(inputs.target_config))
    max_len = inputs.max_model_len or int(tc.get("max_position_embeddings") or 1)
    if kind == "glm5next":
        head_size = hf.kv_lora_rank + hf.qk_rope_head_dim
        mc = ModelConfigStandIn(hf, "Glm5NextForCausalLM", dtype, max_len, True, head_size, 1)
    elif kind == "kimi_linear":
        head_size = hf.kv_lora_rank + hf.qk_rope_head_dim  # ModelArchConfigConvertor (MLA)
        mc = ModelConfigStandIn(hf, "KimiLinearForCausalLM", dtype, max_len, True, head_size, 1)
    elif kind == "qwen3":
        mc = ModelConfigStandIn(hf, "Qwen3ForCausalLM", dtype, max_len, False, hf.head_dim,
                                hf.num_key_value_heads, is_hybrid=False)
    else:
        hd = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        mc = ModelConfigStandIn(hf, "Qwen3NextForCausalLM", dtype, max_len, False, hd,
                                hf.num_key_value_heads)

    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"))
    cfg.model_config = mc
    cfg.parallel_config.tensor_parallel_size = tp
    cfg.scheduler_config.disable_hybrid_kv_cache_manager = False
    cache = cfg.cache_config
    cache.cache_dtype = inputs.kv_cache_dtype
    if inputs.block_size is not None:
        cache.block_size = inputs.block_size
        cache.user_specified_block_size = True
    else:
        cache.block_size = DEFAULT_BLOCK_SIZE
        cache.user_specified_block_size = False
    # EngineArgs builds the cache config with prefix caching resolved and
    # mamba_cache_mode left at "none"; MambaModelConfig (below) derives the
    # mode and the mamba block size from it.
    cache.enable_prefix_caching = inputs.enable_prefix_caching
    cache.mamba_cache_mode = "none"
    cache.mamba_block_size = None
    cfg.scheduler_config.enable_chunked_prefill = True  # default for generative models
    if inputs.max_num_batched_tokens is not None:  # what `vllm serve` resolves (the gate input says)
        cfg.scheduler_config.max_num_batched_tokens = inputs.max_num_batched_tokens
    drafter = inputs.drafter_config if with_drafter else None
    spec_cfg = None
    if num_spec or drafter is not None:
        spec_cfg = types.SimpleNamespace(
            method="dflash", num_speculative_tokens=num_spec,
            kv_cache_dtype=inputs.drafter_kv_cache_dtype if drafter is not None else None,
            attention_backend=inputs.drafter_attention_backend, draft_model_config=None,
            parallel_drafting=True)  # DFlash drafts all positions in one pass
    cfg.speculative_config = spec_cfg

    if kind == "glm5next":
        from vllm.model_executor.models.config import Glm5NextModelConfig
        from vllm.platforms import current_platform

        with patched(type(current_platform), "is_cuda", lambda self: True):
            Glm5NextModelConfig.verify_and_update_config(cfg)
    # VllmConfig.try_verify_and_update_config: the architecture's hook, then
    # the hybrid one for every hybrid model.
    from vllm.model_executor.models.config import HybridAttentionMambaModelConfig

    if mc.is_hybrid:
        HybridAttentionMambaModelConfig.verify_and_update_config(cfg)
    if cache.mamba_cache_mode != inputs.mamba_cache_mode:
        raise ValueError(f"vLLM runs mamba_cache_mode {cache.mamba_cache_mode!r} with prefix "
                         f"caching {inputs.enable_prefix_caching}, the input says "
                         f"{inputs.mamba_cache_mode!r}")
    return cfg, kind, hf
