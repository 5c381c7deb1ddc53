"""Requests at once, counted by the imported vLLM: the KV cache planned as
``plan_with_vllm`` plans it, the scheduler's view of it
(``generate_scheduler_kv_cache_config``), vLLM's ``KVCacheManager`` built on
it as the scheduler builds one, and requests of a length allocated from the
manager's ``BlockPool`` until the pool refuses.

Each request takes, in every group, the blocks the group's spec says one
request of that length holds (``cdiv(max_memory_usage_bytes, page)`` with
``max_model_len`` set to the length, what ``get_max_concurrency_for_kv_cache_config``
sums), so the count is vLLM's pool and vLLM's per-group accounting, the
null block included; ``vllm_max_concurrency`` is what vLLM itself logs.
"""

from __future__ import annotations

from ..inputs import GeometryInputs
from .plan import scheduler_kv_cache_config
from .serving_platform import serving_platform


def _count(cfg, kvc, tokens: int) -> dict:
    from vllm.utils.math_utils import cdiv
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import (
        get_max_concurrency_for_kv_cache_config,
        resolve_kv_cache_block_sizes,
    )

    planned_len = cfg.model_config.max_model_len
    cfg.model_config.max_model_len = tokens
    try:
        per_group = [
            cdiv(g.kv_cache_spec.max_memory_usage_bytes(cfg), g.kv_cache_spec.page_size_bytes)
            for g in kvc.kv_cache_groups
        ]
        logged = get_max_concurrency_for_kv_cache_config(cfg, kvc)
    finally:
        cfg.model_config.max_model_len = planned_len
    scheduler_block, hash_block = resolve_kv_cache_block_sizes(kvc, cfg)
    manager = KVCacheManager(
        kvc,
        max_model_len=planned_len,
        scheduler_block_size=scheduler_block,
        hash_block_size=hash_block,
        max_in_flight_tokens=cfg.max_in_flight_tokens,
        enable_caching=cfg.cache_config.enable_prefix_caching,
    )
    pool = manager.block_pool
    held = 0
    while pool.get_num_free_blocks() >= sum(per_group):
        for n in per_group:
            pool.get_new_blocks(n)
        held += 1
    return {
        "requests": held,
        "blocks_per_request": sum(per_group),
        "vllm_max_concurrency": round(logged, 2),
        "in_flight_tokens": cfg.max_in_flight_tokens,
    }


def requests_until_refused(inputs: GeometryInputs, contexts: list[int]) -> dict:
    """``{plan label: [count per context]}`` for the with-drafter plan and the
    target alone without speculation."""
    out = {}
    plans = {"with_drafter": (inputs.has_drafter, inputs.num_speculative_tokens)}
    if inputs.has_drafter:
        plans["without_drafter"] = (False, 0)
    with serving_platform(inputs.capability_family):
        for label, (with_drafter, num_spec) in plans.items():
            cfg, kvc = scheduler_kv_cache_config(inputs, with_drafter, num_spec)
            out[label] = [_count(cfg, kvc, n) for n in contexts]
    return out
