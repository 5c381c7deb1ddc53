"""The ``VllmConfig`` vLLM's planning reads, built for a ``GeometryInputs``.

``VllmConfig`` is real, but its ``model_config`` is a small object
(model_config_stand_in.py, built by the architecture's oracle entry) carrying the
attributes the planning functions read (HF config, dtype, ``use_mla``,
``get_num_kv_heads``, ``get_head_size``, ...) and ``speculative_config`` carries
``method``/``num_speculative_tokens``/``kv_cache_dtype``/``attention_backend``.
The architecture's own ``verify_and_update_config`` hooks then run on it as
``VllmConfig.try_verify_and_update_config`` runs them.
"""

from __future__ import annotations

import types
from typing import Any, Mapping

from geometry.kv.backends import CPU_FAMILY
from geometry.model.inputs import GeometryInputs
from geometry.oracle.architecture import OracleArchitecture
from geometry.oracle.architectures import oracle_architecture


def _hf_config(arch: OracleArchitecture, text: Mapping[str, Any]):
    """The target's text config as vLLM loads it; ValueError naming the class if that
    class refuses it (vLLM could not load the model either)."""
    tc = {k: v for k, v in text.items() if not k.startswith("_")}
    cls = arch.hf_config_class()
    try:
        return cls(**tc)
    except Exception as exc:  # noqa: BLE001 - transformers' validation errors share no base but Exception
        raise ValueError(f"{cls.__name__} refuses the target config: {' '.join(str(exc).split())}") from exc


def _bind_speculative_methods(spec_cfg) -> None:
    """``SpeculativeConfig``'s own predicates on the stand-in (the planner of a release without the draft
    tag, ``VllmRelease.spec_draft_tag``, asks ``use_eagle()`` / ``use_eagle_block_drop()`` to annotate the
    drafter's groups), as the class has them."""
    from vllm.config import SpeculativeConfig

    for name in ("use_eagle", "use_eagle_block_drop", "use_dflash"):
        method = getattr(SpeculativeConfig, name, None)
        if method is not None:
            setattr(spec_cfg, name, types.MethodType(method, spec_cfg))


def build_vllm_config(inputs: GeometryInputs, with_drafter: bool, num_spec: int):
    """``(vllm_config, hf_config)`` for ``inputs``, after the model's and
    the hybrid models' config hooks; ValueError if vLLM resolves another
    ``mamba_cache_mode`` than the input states."""
    import torch
    from vllm.config import DeviceConfig, VllmConfig

    target = inputs.target
    arch = oracle_architecture(target.kind)
    tp = inputs.tensor_parallel_size
    hf = _hf_config(arch, target.text)
    dtype = getattr(torch, target.model_dtype)
    mc = arch.model_config(hf, target.architecture.hf_architecture, dtype, target.max_model_len(inputs.max_model_len))
    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"))
    cfg.model_config = mc
    # VllmConfig.__post_init__ resolves the sparse MLA prefill workspace from the model length once a
    # model config is set (the GLM indexer sizes its buffers from it).
    cfg.attention_config.sparse_mla_prefill_workspace_factor = 5 if mc.max_model_len <= 256 * 1024 else 2
    cfg.parallel_config.tensor_parallel_size = tp
    cfg.scheduler_config.disable_hybrid_kv_cache_manager = False
    cache = cfg.cache_config
    cache.cache_dtype = inputs.kv_cache_dtype
    if inputs.block_size is not None:
        cache.block_size = inputs.block_size
        cache.user_specified_block_size = True
    else:
        cache.block_size = inputs.vllm.default_block_size  # CacheConfig.DEFAULT_BLOCK_SIZE
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
            method="dflash",
            num_speculative_tokens=num_spec,
            kv_cache_dtype=inputs.drafter_kv_cache_dtype if drafter is not None else None,
            attention_backend=inputs.drafter_attention_backend,
            draft_model_config=None,
            parallel_drafting=True,
            disable_eagle_block_drop=False,
            enable_adaptive_verification=False,  # SpeculativeConfig's default
        )  # DFlash drafts all positions in one pass
        _bind_speculative_methods(spec_cfg)
    cfg.speculative_config = spec_cfg
    if inputs.capability_family == CPU_FAMILY:
        # VllmConfig.__post_init__ runs the platform's config hook on the whole config; CpuPlatform's
        # sets the CPU block (cpu_default_block_size when the release's cpu_block_from_backends is false),
        # resets mamba_ssm_cache_dtype and turns async scheduling off. Run it again now that the model,
        # cache and speculative configs are the input's.
        from vllm.platforms import current_platform

        type(current_platform).check_and_update_config(cfg)

    if arch.verify is not None:
        arch.verify(cfg)
    # VllmConfig.try_verify_and_update_config: the architecture's hook, then
    # the hybrid one for every hybrid model.
    from vllm.model_executor.models.config import HybridAttentionMambaModelConfig

    if mc.is_hybrid:
        HybridAttentionMambaModelConfig.verify_and_update_config(cfg)
    if cache.mamba_cache_mode != inputs.mamba_cache_mode:
        raise ValueError(
            f"vLLM runs mamba_cache_mode {cache.mamba_cache_mode!r} with prefix "
            f"caching {inputs.enable_prefix_caching}, the input says "
            f"{inputs.mamba_cache_mode!r}"
        )
    return cfg, hf
