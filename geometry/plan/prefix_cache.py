"""Prefix caching as the modelled vLLM release's engine core sets it up for the scheduler
(stdlib only).

``EngineCore._initialize_kv_caches`` (vllm/v1/engine/core.py) takes the
scheduler's view of the KV-cache groups (each group reduced to its first
layer's spec), sets the cache block size to the smallest prefix-cacheable
group block, then resolves

* the scheduler block size: the token grid ``num_computed_tokens`` is rounded
  to (one group: its block; several: the LCM of the group blocks);
* the hash block size: the granularity of the request's block hashes (with
  prefix caching on, several groups and every mamba group in "align" mode: the
  GCD of the prefix-cacheable group blocks; otherwise the scheduler block);
* the cache-hit alignment: where a hit can land (``partial_hash_hits_enabled``:
  the hash block when a mamba group in "align" mode has blocks larger than the
  hash block and every prefix-cacheable group's manager can look up at hash
  granularity or already uses the hash block; otherwise the scheduler block).

(vllm/v1/core/kv_cache_utils.py ``resolve_kv_cache_block_sizes``,
``resolve_cache_hit_alignment_tokens``, ``partial_hash_hits_enabled``.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from geometry.kv.kv_spec import KVCacheSpec


@dataclass(frozen=True)
class PrefixCache:
    """Prefix caching as the scheduler runs it for one plan."""

    enabled: bool
    hash_block_size: int
    scheduler_block_size: int
    hit_alignment_tokens: int
    can_hit: bool  # a prompt shorter than max_model_len can get a hit at all


@dataclass(frozen=True)
class CacheGroup:
    """What the resolution reads of one KV-cache group: its first layer's spec
    (whose kind says whether it is prefix-cacheable, whether its manager looks
    hits up at hash granularity, and whether it holds a mamba state)."""

    spec: KVCacheSpec

    @property
    def block_size(self) -> int:
        return self.spec.block_size

    @property
    def tokens_per_state(self) -> int:
        return self.spec.tokens_per_state

    @property
    def prefix_cacheable(self) -> bool:
        return self.spec.prefix_cacheable


class PrefixCacheError(ValueError):
    """vLLM refuses to start: hits could not land on a spec's state grid."""


def can_hit(enabled: bool, hit_alignment_tokens: int, max_model_len: int) -> bool:
    """A hit covers whole alignment units and never the prompt's last token,
    so a prompt of at most ``max_model_len`` tokens can hit only if one unit
    is shorter than that."""
    return enabled and hit_alignment_tokens < max_model_len


def _mamba_splits_blocks(groups: Sequence[CacheGroup], mamba_cache_mode: str, hash_block: int) -> bool:
    """``partial_hash_hits_enabled`` without managers (DCP 1): an "align"
    mamba group has blocks larger than the hash block."""
    return mamba_cache_mode == "align" and any(g.spec.holds_state and g.block_size > hash_block for g in groups)


def _managers_look_up_finely(groups: Sequence[CacheGroup], hash_block: int) -> bool:
    """The managers' half of ``partial_hash_hits_enabled``."""
    return all(g.spec.fine_grained_lookup or g.block_size == hash_block for g in groups if g.prefix_cacheable)


def resolve(groups: Sequence[CacheGroup], enabled: bool, mamba_cache_mode: str, max_model_len: int) -> PrefixCache:
    """The engine core's resolution for the scheduler's groups (DCP 1, no
    KV connector, no ``prefix_match_unit``)."""
    if not groups:
        raise ValueError("no KV-cache groups")
    if len(groups) == 1:
        scheduler = hash_block = alignment = groups[0].block_size
    else:
        scheduler = math.lcm(*(g.block_size for g in groups))
        has_none_mamba = any(g.spec.holds_state for g in groups) and mamba_cache_mode != "align"
        if not enabled or has_none_mamba:
            hash_block = alignment = scheduler
        else:
            hashing = [g.block_size for g in groups if g.prefix_cacheable] or [g.block_size for g in groups]
            hash_block = math.gcd(*hashing)
            splits = _mamba_splits_blocks(groups, mamba_cache_mode, hash_block)
            # resolve_kv_cache_block_sizes checks the state grids against the
            # alignment without the managers' half
            checked = hash_block if splits else scheduler
            grids = sorted({g.tokens_per_state for g in groups if g.prefix_cacheable and g.tokens_per_state > 1})
            if any(checked % grid for grid in grids):
                raise PrefixCacheError(
                    f"ValueError: prefix-cache hits every {checked} tokens do not land on the per-state grids {grids}"
                )
            alignment = hash_block if splits and _managers_look_up_finely(groups, hash_block) else scheduler
    return PrefixCache(
        enabled=enabled,
        hash_block_size=hash_block,
        scheduler_block_size=scheduler,
        hit_alignment_tokens=alignment,
        can_hit=can_hit(enabled, alignment, max_model_len),
    )
