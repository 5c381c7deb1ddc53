"""``Platform.update_block_size_for_backend``: the common block size of the
non-SSM backends, the hybrid alignment with the first of them, and the
post-check (stdlib only)."""

from __future__ import annotations

import itertools
import math

from geometry.kv import backends as B
from geometry.kv.kv_spec import CacheConfig, SimulatedError
from geometry.kv.units import cdiv
from geometry.model.inputs import GeometryInputs
from geometry.model.model import Model


def update_block_size(model: Model, inputs: GeometryInputs) -> CacheConfig:
    user = inputs.block_size is not None
    # CpuPlatform asks its backends for their preference from cpu_default_block_size
    # (cpu_block_from_backends true) or sets it in its config hook (false); the base platform asks from
    # default_block_size.
    vllm = inputs.vllm
    cpu = inputs.capability_family == B.CPU_FAMILY
    default = vllm.cpu_default_block_size if cpu else vllm.default_block_size
    fixed_by_hook = cpu and not vllm.cpu_block_from_backends
    cache = CacheConfig(block_size=inputs.block_size or (default if fixed_by_hook else vllm.default_block_size))
    backends = model.attention_backends
    if not backends:
        return cache
    if not user and not fixed_by_hook:
        if len(backends) == 1:
            cache.block_size = backends[0].preferred_block_size(default)
        elif all(b.supports_block_size(default) for b in backends):
            cache.block_size = default
        else:
            per_backend = [
                [s.base if isinstance(s, B.Multiple) else s for s in b.kernel_block_sizes] or [1] for b in backends
            ]
            cands = sorted({math.lcm(*c) for c in itertools.product(*per_backend)})
            for c in cands:
                if all(b.supports_block_size(c) for b in backends):
                    cache.block_size = c
                    break
            else:
                raise SimulatedError("ValueError", "The attention backends share no supported KV cache block size")
    pre = cache.block_size
    # phase 2: _align_hybrid_block_size with backends[0]
    attn_1 = model.attn_page_1_token
    mamba_page = model.mamba_page
    if mamba_page:
        first = backends[0]
        kba = max(first.min_kernel_block, cache.block_size)
        bba = math.lcm(*(b.min_kernel_block for b in backends if b.kernel_block_sizes))
        if model.use_mla:
            kba = max(kba, 128)
        if inputs.mamba_cache_mode == "align":
            # internal prefill checkpoints land on block boundaries
            kba = math.lcm(kba, model.architecture.prefill_checkpoint_alignment or 1)
        attn_block = kba * cdiv(mamba_page, kba * attn_1)
        attn_block = bba * cdiv(attn_block, bba)
        if cache.block_size < attn_block:
            cache.block_size = attn_block
        attn_page = cache.block_size * attn_1
        if attn_page != mamba_page:
            cache.mamba_page_size_padded = attn_page
    # _check_aligned_block_size
    if cache.block_size != pre:
        rejecting = [b.name for b in backends if not b.supports_block_size(cache.block_size)]
        if rejecting:
            raise SimulatedError(
                "ValueError",
                f"Aligned KV cache block size {cache.block_size} "
                f"is not supported by attention backend(s): {', '.join(rejecting)}.",
            )
    # MambaModelConfig / _align_hybrid_block_size: the attention block with
    # prefix caching ("align"), else max_model_len ("none").
    cache.mamba_block_size = cache.block_size if inputs.mamba_cache_mode == "align" else model.max_model_len
    return cache
