"""The engine-core path: vLLM's ``EngineCore._initialize_kv_caches`` on specs
built from explicit GLM-5.3 + DFlash2 parameters (keys of ``ENGINE_CORE_DEFAULTS``).

What is vLLM's own code here, and what stands in for it:

* The drafter's KV spec comes from the real ``Attention.get_kv_cache_spec``
  (the place where stock vLLM picks the drafter's sliding-window block size
  and the overlay series fits it), customised by the real
  ``customize_attention_spec`` with the drafter's backend (FLASH_ATTN: vLLM's
  choice for a non-causal DFlash drafter on SM10x), collected by the V2
  runner's ``get_kv_cache_spec``.
* The target's specs (MLA latent, kpool indexer, kpool tail ring, KDA state)
  are built with vLLM's spec classes and ``MambaStateShapeCalculator`` /
  ``MambaStateDtypeCalculator`` exactly as the GLM-5.3 layers' own
  ``get_kv_cache_spec`` bodies build them (their constructors need CUDA);
  the KDA prefill kernel (``kda_prefill_backend``) decides the state's
  prefill checkpoint alignment.
* The hybrid block size B follows ``Platform._align_hybrid_block_size``'s
  formula (the indexer backend's smallest kernel block, at least 128 for MLA).
* Grouping, unification, block counts, the global block size and the hash
  and cache-hit block sizes run through vLLM's real
  ``EngineCore._initialize_kv_caches``. The GPU workers are replaced by a
  stand-in executor that returns the per-rank specs and the available KV
  memory; nothing in vLLM's planning is replaced.

All of it runs under the serving GPU's platform (serving_platform.py, family
``ENGINE_CORE_FAMILY``), not the process's, as ``plan_with_vllm`` does.

``plan_with_vllm`` drives more of vLLM (model config, platform alignment,
every layer's own ``get_kv_cache_spec``) from a gate input; this path is the
one that covers what only the engine core does (the global block size after
grouping, the scheduler's view) and the patched tree's log lines.

Command line (``sys.path`` must start with the vLLM tree under test, e.g.
``PYTHONPATH=TREE:REPO:REPO/tests``)::

    python -m support.engine_core_cli --engine-core '[{"tp": 1, "num_spec": 7, ...}, ...]'

prints one ``OVERLAY_PLAN {json}`` line (``engine_core_summary``) per case.
"""

from __future__ import annotations

import sys

from geometry.oracle.layer_objects import bare_layer
from geometry.oracle.serving_platform import serving_platform

ENGINE_CORE_DEFAULTS = {
    # GLM-5.3-Flash target (transformers Glm5NextTextConfig defaults).
    "num_hidden_layers": 45,
    "mla_layer_ids": list(range(3, 45, 4)),
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 0,
    "linear_num_heads": 64,
    "linear_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "index_head_dim": 128,
    "index_kpool": 16,
    "index_topk": 2048,
    "max_model_len": 1048576,
    # DFlash2 drafter (BF16).
    "draft_num_layers": 5,
    "draft_num_kv_heads": 8,
    "draft_head_dim": 128,
    "draft_sliding_window": 2048,
    "draft_kv_dtype": "auto",  # bf16
    # Runtime.
    "tp": 1,
    "num_spec": 7,
    "kv_cache_dtype": "fp8",
    "with_drafter": True,
    "kv_memory_gib": 200,
    "max_num_batched_tokens": 8192,
    # "none": prefix caching off (the KDA state is not checkpointed);
    # "align": prefix caching on, what vLLM serves a hybrid model with by
    # default (MambaModelConfig.verify_and_update_config).
    "mamba_cache_mode": "none",
    # The KDA chunked-prefill kernel ("flashkda" on SM90/SM10x/SM12x for bf16,
    # head_dim 128 and a bounded gate; else "triton"): it decides whether the
    # KDA state can be checkpointed inside a prefill chunk.
    "kda_prefill_backend": "triton",
}

# The GPU family planned for: GB300's. The hybrid block's indexer alignment (32-state
# pages) and FLASH_ATTN for the drafter below are SM10x's.
ENGINE_CORE_FAMILY = 100


class BadEngineCoreCase(ValueError):
    """A case that is not an object of ``ENGINE_CORE_DEFAULTS`` keys (one line naming what)."""


def engine_core_parameters(params) -> dict:
    """``params`` over ``ENGINE_CORE_DEFAULTS``; BadEngineCoreCase for a key the defaults
    do not have (it would change nothing) or a case that is not an object."""
    if not isinstance(params, dict):
        raise BadEngineCoreCase(f"a case is an object of engine-core keys, not {type(params).__name__} {params!r}")
    for key in params:
        if key not in ENGINE_CORE_DEFAULTS:
            raise BadEngineCoreCase(f"unknown key {key!r} (keys: {', '.join(ENGINE_CORE_DEFAULTS)})")
    return dict(ENGINE_CORE_DEFAULTS, **params)


def engine_core_plan(params: dict):
    """vLLM's KV cache configuration for ``params`` (keys of
    ``ENGINE_CORE_DEFAULTS``; BadEngineCoreCase for anything else), planned by
    ``EngineCore._initialize_kv_caches``.

    Returns a namespace: ``vllm_config``, ``scheduler`` (the scheduler's KV
    cache config, what ``EngineCore._initialize_kv_caches`` returns, with the
    hash block size and cache-hit alignment set on it), ``workers`` (the
    per-rank configs), ``target_block_size`` (the hybrid block B) and
    ``target_mla_page`` (the MLA latent page at B).
    """
    from types import SimpleNamespace

    from vllm.v1.engine.core import EngineCore

    p = engine_core_parameters(params)
    with serving_platform(ENGINE_CORE_FAMILY):
        vllm_config = _vllm_config(p)
        block, mla_bpt, kda = _hybrid_block(p, vllm_config.cache_config)
        specs = _layer_specs(p, vllm_config, kda)
        executor = _StandInExecutor(specs, p["tp"], int(p["kv_memory_gib"] * (1 << 30)))
        core = object.__new__(EngineCore)
        core.model_executor = executor
        core.available_gpu_memory_for_kv_cache = -1
        scheduler = EngineCore._initialize_kv_caches(core, vllm_config)
    return SimpleNamespace(
        vllm_config=vllm_config,
        scheduler=scheduler,
        workers=executor.captured,
        target_block_size=block,
        target_mla_page=block * mla_bpt,
    )


def _vllm_config(p: dict):
    """The real config dataclasses, with only the fields planning reads filled."""
    import torch
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )

    model_config = object.__new__(ModelConfig)
    for k, v in {
        "max_model_len": p["max_model_len"],
        "original_max_model_len": p["max_model_len"],
        "dtype": torch.bfloat16,
    }.items():
        object.__setattr__(model_config, k, v)

    class _Info:  # registry answer for Glm5NextForCausalLM
        supports_kv_cache_grouping = False

    object.__setattr__(model_config, "_model_info", _Info())
    cache_config = CacheConfig(cache_dtype=p["kv_cache_dtype"])
    cache_config.kv_cache_layout = None
    if p["mamba_cache_mode"] == "align":
        # MambaModelConfig.verify_and_update_config with prefix caching on.
        cache_config.enable_prefix_caching = True
        cache_config.mamba_cache_mode = "align"
    else:
        cache_config.enable_prefix_caching = False
    vllm_config = VllmConfig(
        # Named, as vllm_config.py does: the serving platform detects no device type.
        device_config=DeviceConfig(device="cpu"),
        cache_config=cache_config,
        parallel_config=ParallelConfig(tensor_parallel_size=1),
        scheduler_config=SchedulerConfig(
            max_model_len=p["max_model_len"],
            max_num_batched_tokens=p["max_num_batched_tokens"],
            is_encoder_decoder=False,
        ),
    )
    object.__setattr__(vllm_config, "model_config", model_config)
    vllm_config.parallel_config.tensor_parallel_size = p["tp"]
    if p["with_drafter"]:
        spec_config = object.__new__(SpeculativeConfig)
        for k, v in {
            "method": "dflash",
            "num_speculative_tokens": p["num_spec"],
            "disable_eagle_block_drop": False,
            "num_speculative_tokens_per_batch_size": None,
            "draft_model_config": None,
        }.items():
            object.__setattr__(spec_config, k, v)
        object.__setattr__(vllm_config, "speculative_config", spec_config)
    return vllm_config


def _hybrid_block(p: dict, cache_config):
    """The hybrid block size B (``Platform._align_hybrid_block_size``'s formula),
    set on ``cache_config``: ``(B, MLA bytes per token, (KDA state shapes, dtypes,
    prefill checkpoint alignment))``."""
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )
    from vllm.utils.math_utils import cdiv
    from vllm.v1.kv_cache_interface import MambaSpec, MLAAttentionSpec, get_kv_quant_mode

    mla_bpt = MLAAttentionSpec(
        block_size=1,
        num_kv_heads=1,
        head_size=p["kv_lora_rank"] + p["qk_rope_head_dim"],
        dtype=torch.uint8 if p["kv_cache_dtype"].startswith("fp8") else torch.bfloat16,
        cache_dtype_str=p["kv_cache_dtype"],
        kv_quant_mode=get_kv_quant_mode(p["kv_cache_dtype"]),
    ).page_size_bytes
    # num_spec sizes the target's own state (KDA conv, kpool tail ring) with or
    # without drafter layers, so "no drafter" compares the same target geometry.
    kda_shapes = MambaStateShapeCalculator.kda_state_shape(
        p["tp"],
        p["linear_num_heads"],
        p["linear_head_dim"],
        conv_kernel_size=p["linear_conv_kernel_dim"],
        num_spec=p["num_spec"],
    )
    kda_dtypes = MambaStateDtypeCalculator.kda_state_dtype(torch.bfloat16, "auto", "auto")
    from vllm.model_executor.layers.mamba.kda_checkpoint import (
        kda_prefill_checkpoint_alignment,
    )

    # Glm5NextLinearAttention.get_kv_cache_spec adds these to MambaBase's spec.
    kda_alignment = kda_prefill_checkpoint_alignment(p["kda_prefill_backend"])
    mamba_page = MambaSpec(shapes=kda_shapes, dtypes=kda_dtypes, block_size=-1).page_size_bytes
    # Indexer backend (first non-SSM backend in layer order): 32-state pages.
    align = max(32 * p["index_kpool"], cache_config.block_size, 128)
    block = align * cdiv(mamba_page, align * mla_bpt)
    cache_config.block_size = block
    cache_config.mamba_block_size = block
    cache_config.mamba_page_size_padded = block * mla_bpt if block * mla_bpt != mamba_page else None
    return block, mla_bpt, (kda_shapes, kda_dtypes, kda_alignment)


def _layer_specs(p: dict, vllm_config, kda) -> dict:
    """Per-rank layer specs in layer order: the MLA and drafter layers' collected by
    the V2 runner's own function, the KDA, indexer and tail specs built as their
    layers build them."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.attention import Attention
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
    from vllm.utils.math_utils import cdiv, next_power_of_2
    from vllm.v1.attention.backend import AttentionType
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse import (
        FlashInferMLASparseTRTLLMBackend,
    )
    from vllm.v1.attention.backends.mla.indexer import (
        Glm5NextIndexerBackend,
        KpoolTailBackend,
    )
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import (
        CircularBufferSpec,
        MambaSpec,
        MLAAttentionSpec,
        SparseCacheRole,
    )
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec
    from vllm.v1.worker.utils import customize_attention_spec

    kda_shapes, kda_dtypes, kda_alignment = kda
    tp, num_spec = p["tp"], p["num_spec"]
    cache_config = vllm_config.cache_config
    forward_context = vllm_config.compilation_config.static_forward_context
    kv_dtype = p["kv_cache_dtype"]
    order: list = []
    mamba_specs: dict = {}  # specs not collected from layer objects
    with set_current_vllm_config(vllm_config):
        for i in range(p["num_hidden_layers"]):
            pre = f"model.layers.{i}"
            if i not in p["mla_layer_ids"]:
                mamba_specs[f"{pre}.self_attn"] = MambaSpec(
                    shapes=tuple(kda_shapes),
                    dtypes=kda_dtypes,
                    block_size=cache_config.mamba_block_size,
                    page_size_padded=cache_config.mamba_page_size_padded,
                    mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
                    mamba_cache_mode=cache_config.mamba_cache_mode,
                    num_speculative_blocks=num_spec,
                    num_prefill_checkpoint_blocks=int(kda_alignment is not None),
                    prefill_checkpoint_alignment=kda_alignment,
                )
                order.append(f"{pre}.self_attn")
                continue
            forward_context[f"{pre}.self_attn.attn"] = bare_layer(
                MLAAttention,
                kv_cache_dtype=kv_dtype,
                head_size=p["kv_lora_rank"] + p["qk_rope_head_dim"],
                sliding_window=None,
                topk_buffer_width=p["index_topk"],
                indexer=object(),
                non_causal_multi_token_decode=False,
                attn_backend=FlashInferMLASparseTRTLLMBackend,
                is_draft_layer=False,
            )
            # Glm5NextIndexerCache / Glm5NextTailCache.get_kv_cache_spec (their
            # module imports the multimodal model, which needs torchvision),
            # customised by their backends as the runner does.
            kpool = p["index_kpool"]
            mamba_specs[f"{pre}.self_attn.indexer.k_cache"] = customize_attention_spec(
                Glm5NextIndexerBackend,
                MLAAttentionSpec(
                    block_size=cache_config.block_size,
                    num_kv_heads=1,
                    max_tp_shards=1,
                    head_size=p["index_head_dim"] + p["index_head_dim"] // 128 * 4,
                    dtype=torch.uint8,
                    cache_role=SparseCacheRole.INDEXER,
                    tokens_per_state=kpool,
                ),
            )
            ring = kpool * next_power_of_2(cdiv(kpool + num_spec, kpool))
            mamba_specs[f"{pre}.self_attn.indexer.tail_cache"] = customize_attention_spec(
                KpoolTailBackend,
                CircularBufferSpec(
                    block_size=ring,
                    num_kv_heads=2,
                    head_size=p["index_head_dim"],
                    head_size_v=0,
                    dtype=torch.bfloat16,
                    dcp_sharded=False,
                ),
            )
            order += [
                f"{pre}.self_attn.attn",
                f"{pre}.self_attn.indexer.k_cache",
                f"{pre}.self_attn.indexer.tail_cache",
            ]
        if p["with_drafter"]:
            dtp = max(1, p["draft_num_kv_heads"] // tp)
            for j in range(p["draft_num_layers"]):
                name = f"draft_model.model.layers.{j}.self_attn.attn"
                forward_context[name] = bare_layer(
                    Attention,
                    attn_type=AttentionType.DECODER,
                    kv_cache_dtype=p["draft_kv_dtype"],
                    kv_cache_torch_dtype=(torch.bfloat16 if p["draft_kv_dtype"] == "auto" else torch.uint8),
                    sliding_window=p["draft_sliding_window"],
                    attn_backend=FlashAttentionBackend,
                    num_kv_heads=dtp,
                    head_size=p["draft_head_dim"],
                    head_size_v=p["draft_head_dim"],
                    kv_sharing_target_layer_name=None,
                    # Set by the speculator once the drafter is loaded.
                    is_draft_layer=True,
                )
                order.append(name)
        collected = get_kv_cache_spec(vllm_config)
    collected.update(mamba_specs)
    return {name: collected[name] for name in order}


class _StandInExecutor:
    """Stands in for the GPU workers: reports specs and free memory, and keeps
    the per-rank configs the engine core initializes them with."""

    def __init__(self, specs: dict, tp: int, available: int, layouts: list[str] | None = None):
        self.specs, self.tp, self.available = specs, tp, available
        self.layouts = layouts  # None: the kpool tail backend's
        self.captured = None

    def get_kv_cache_specs(self):
        return [dict(self.specs) for _ in range(self.tp)]

    def get_supported_kv_cache_layouts(self):
        names = self.layouts
        if names is None:
            from vllm.v1.attention.backends.mla.indexer import KpoolTailBackend

            # The kpool tail backend is the most restrictive of the model's
            # backends: block-outermost layouts only.
            names = [x.name for x in KpoolTailBackend.supported_kv_cache_layouts()]
        return [list(names) for _ in range(self.tp)]

    def set_kv_cache_layout(self, *args):
        pass

    def determine_available_memory(self):
        return [self.available] * self.tp

    def collective_rpc(self, *args, **kwargs):
        return [None] * self.tp

    def initialize_from_config(self, configs):
        self.captured = configs

    def compile_or_warm_up_model(self):
        pass


def engine_core_summary(params: dict) -> dict:
    """What ``engine_core_plan(params)`` planned, as JSON-able numbers: the
    bytes per block, number of blocks, the groups and the global, hash and
    cache-hit block sizes (and the imported vLLM's file)."""
    built = engine_core_plan(params)
    cache_config = built.vllm_config.cache_config
    cfg = built.workers[0]

    from vllm.v1.core.kv_cache_planning import _get_kv_cache_bytes_per_block

    bytes_per_block = _get_kv_cache_bytes_per_block(cfg.kv_cache_groups, cache_config.get_resolved_kv_cache_layout())
    groups = []
    draft_padded = False
    for g in cfg.kv_cache_groups:
        from vllm.v1.kv_cache_interface import iter_layer_specs

        layer_specs = list(iter_layer_specs(g.kv_cache_spec))
        is_draft = all(n.startswith("draft_model.") for n in g.layer_names)
        if is_draft:
            draft_padded |= any(getattr(s, "page_size_padded", None) is not None for s in layer_specs)
        groups.append(
            {
                "layers": len(g.layer_names),
                "type": type(layer_specs[0]).__name__,
                "block_size": g.kv_cache_spec.block_size,
                "page_bytes": layer_specs[0].page_size_bytes,
                "group_bytes": sum(s.page_size_bytes for s in layer_specs),
                "draft": is_draft,
                "is_eagle_group": g.is_eagle_group,
            }
        )
    return {
        "target_block_size": built.target_block_size,
        "target_mla_page": built.target_mla_page,
        "bytes_per_block": bytes_per_block,
        "num_blocks": cfg.num_blocks,
        "global_block_size": cache_config.block_size,
        "mamba_cache_mode": cache_config.mamba_cache_mode,
        "hash_block_size": built.scheduler.hash_block_size,
        "cache_hit_alignment_tokens": built.scheduler.cache_hit_alignment_tokens,
        "layout": cache_config.kv_cache_layout,
        "draft_padded": draft_padded,
        "groups": groups,
        "vllm_file": sys.modules["vllm"].__file__,
    }
