"""Requests at once, counted by the imported vLLM's own engine core and scheduler.

The KV cache is planned by ``EngineCore._initialize_kv_caches`` (with a
stand-in for the GPU workers that reports the layers' specs as vLLM's runner
collects them for the gate input, and the KV memory), which also sets the
global block size, the hash block size and the cache-hit alignment; vLLM's
``Scheduler`` (``AsyncScheduler`` where async scheduling is on, as
``SchedulerConfig.get_scheduler_cls`` picks it) is then built the way
``EngineCore.__init__`` builds it, and it builds its own ``KVCacheManager``.

Requests of ``tokens`` tokens are admitted one after another: a prompt of
``tokens - 1`` tokens (vLLM refuses a prompt that leaves no room for one output
token, so that is the longest prompt of a request that reaches ``tokens``),
fed to ``Scheduler.add_request`` and scheduled by ``Scheduler.schedule``, which
admits it (``allocate_slots`` with ``full_sequence_must_fit``, the speculative
lookahead slots), splits its prefill into chunks (``max_num_batched_tokens``,
the mamba block-aligned split) and allocates each chunk's slots. Steps are
handed back with ``update_from_output`` in the order the engine core's batch
queue hands them back: ``max_concurrent_batches`` steps in flight (two with
async scheduling), a stand-in model output that samples nothing. When the
request's whole prompt is scheduled it leaves the running list holding the
blocks its prefill left it (``holdings``) and the next request comes; the count
is the requests so admitted when the next one is refused (``schedule`` admits
nothing) or preempted mid-prefill.

What stands in for vLLM: the model output (no token sampled), the model config
fields the scheduler reads beyond planning (a text-only generate model,
tokenizer skipped) and the speculative config's predicates (SpeculativeConfig's
own methods bound to the planning stand-in).
"""

from __future__ import annotations

import dataclasses
import types
from collections import deque

from geometry.model.inputs import GeometryInputs
from geometry.oracle.cpu_shims import model_registry_fallback
from geometry.oracle.plan import _build
from geometry.oracle.serving_platform import serving_platform
from support.engine_core import _StandInExecutor

# What the engine core and the scheduler read of the model config beyond planning: a text-only,
# decoder-only generate model whose class declares no KV-cache grouping of its own (no model class of
# the modelled vLLM release implements SupportsKVCacheGrouping).
SCHEDULER_MODEL_FIELDS = {
    "supports_kv_cache_grouping": False,
    "uses_mrope": False,
    "is_encoder_decoder": False,
    "is_diffusion": False,
    "supports_multimodal_inputs": False,
    "return_sampling_mask": False,
    "multimodal_config": None,
    "skip_tokenizer_init": True,
}
# SpeculativeConfig's predicates the scheduler and VllmConfig's lookahead properties ask.
SPECULATIVE_METHODS = (
    "use_eagle",
    "use_eagle_block_drop",
    "needs_eagle_block_drop",
    "use_dflash",
    "use_dspark",
    "uses_draft_model",
    "use_multi_module_mtp",
    "uses_dynamic_speculative_decoding",
)


def _scheduler_stand_ins(cfg) -> None:
    from vllm.config import SpeculativeConfig

    for key, value in SCHEDULER_MODEL_FIELDS.items():
        setattr(cfg.model_config, key, value)
    # ModelConfig keeps the max_model_len it was given (-1 would ask the planner to fit it to the pool).
    cfg.model_config.original_max_model_len = cfg.model_config.max_model_len
    spec = cfg.speculative_config
    if spec is None:
        return
    spec.num_speculative_tokens_per_batch_size = None
    spec.disable_lookahead_block_hashes = False
    for name in SPECULATIVE_METHODS:
        setattr(spec, name, types.MethodType(getattr(SpeculativeConfig, name), spec))
    speculator = getattr(SpeculativeConfig, "speculator_config", None)
    if isinstance(speculator, property):  # vLLM 0.34.0: the method's speculator config answers for it
        spec.custom_method = None
        spec.speculator_config = speculator.fget(spec)
        spec.uses_target_hidden_states = SpeculativeConfig.uses_target_hidden_states.fget(spec)
    spec.max_num_new_slots_for_drafting = SpeculativeConfig.max_num_new_slots_for_drafting.fget(spec)


def engine_core_scheduler(
    inputs: GeometryInputs,
    with_drafter: bool,
    num_spec: int,
    num_gpu_blocks_override: int | None = None,
    max_num_seqs: int | None = None,
):
    """``(vllm_config, scheduler, block_hasher)``: the KV cache planned by ``EngineCore._initialize_kv_caches``
    for ``inputs`` and vLLM's scheduler on it, as ``EngineCore.__init__`` sets them up (``--num-gpu-blocks-override``
    and ``--max-num-seqs`` set on the config as `vllm serve` sets them). Call it inside ``serving_platform``."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.platforms import current_platform
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, resolve_kv_cache_block_sizes
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    cfg = _build(inputs, with_drafter, num_spec)
    cfg.cache_config.num_gpu_blocks_override = num_gpu_blocks_override
    if max_num_seqs is not None:
        cfg.scheduler_config.max_num_seqs = max_num_seqs
    with model_registry_fallback():
        type(current_platform).update_block_size_for_backend(cfg)
    with set_current_vllm_config(cfg):
        specs = get_kv_cache_spec(cfg)
        layouts = [layout.name for layout in get_supported_kv_cache_layouts(get_current_attn_backends(cfg))]
    cfg.cache_config.kv_cache_layout = None
    _scheduler_stand_ins(cfg)
    core = object.__new__(EngineCore)
    core.model_executor = _StandInExecutor(specs, inputs.tensor_parallel_size, inputs.kv_cache_memory_bytes, layouts)
    core.available_gpu_memory_for_kv_cache = -1
    with set_current_vllm_config(cfg):
        kv_cache_config = EngineCore._initialize_kv_caches(core, cfg)
        scheduler_block, hash_block = resolve_kv_cache_block_sizes(kv_cache_config, cfg)
        scheduler = cfg.scheduler_config.get_scheduler_cls()(
            vllm_config=cfg,
            kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(cfg),
            block_size=scheduler_block,
            hash_block_size=hash_block,
        )
    hasher = None
    if cfg.cache_config.enable_prefix_caching:
        hash_fn = get_hash_fn_by_name(cfg.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        hasher = get_request_block_hasher(hash_block, hash_fn, cfg.num_hash_lookahead_tokens)
    return cfg, scheduler, hasher


def holdings(scheduler, request_id: str) -> tuple[int, ...]:
    """Per KV-cache group, the blocks (not the null block) the request holds."""
    return tuple(
        sum(not block.is_null for block in manager.req_to_blocks.get(request_id, ()))
        for manager in scheduler.kv_cache_manager.coordinator.single_type_managers
    )


def _count(inputs: GeometryInputs, with_drafter: bool, num_spec: int, tokens: int) -> dict:
    from vllm.config import set_current_vllm_config
    from vllm.sampling_params import SamplingParams
    from vllm.utils.math_utils import cdiv
    from vllm.v1.core.kv_cache_utils import get_max_concurrency_for_kv_cache_config
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus

    cfg, scheduler, hasher = engine_core_scheduler(inputs, with_drafter, num_spec)
    kv_cache_config = scheduler.kv_cache_config
    pool = scheduler.kv_cache_manager.block_pool
    in_flight: deque = deque()

    # vLLM 0.34.0's output dropped req_id_to_index (the index is the position in req_ids).
    indexed = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}

    def hand_back(step) -> None:
        ids = list(step.num_scheduled_tokens)
        index = {"req_id_to_index": {r: i for i, r in enumerate(ids)}} if indexed else {}
        scheduler.update_from_output(step, ModelRunnerOutput(req_ids=ids, sampled_token_ids=[[] for _ in ids], **index))

    prompt = tokens - 1
    held: list[tuple[int, ...]] = []
    chunks: list[int] = []
    peak: tuple[int, ...] = ()
    refused = None
    with set_current_vllm_config(cfg):
        for i in range(kv_cache_config.num_blocks):
            rid = f"r{i}"
            # Token ids differ per request: no request hits another's prefix cache.
            request = Request(rid, [i + 1] * prompt, SamplingParams(max_tokens=1 << 20), None, block_hasher=hasher)
            scheduler.add_request(request)
            sizes = []
            while request.num_computed_tokens < prompt:
                step = scheduler.schedule()
                if request.status != RequestStatus.RUNNING or rid not in step.num_scheduled_tokens:
                    refused = "preempted" if request.num_preemptions else "refused at admission"
                    break
                sizes.append(step.num_scheduled_tokens[rid])
                if i == 0:
                    now = holdings(scheduler, rid)
                    peak = now if not peak or sum(now) > sum(peak) else peak
                in_flight.appendleft(step)
                if len(in_flight) >= cfg.max_concurrent_batches:
                    hand_back(in_flight.pop())
            else:
                scheduler.running.remove(request)  # held as its prefill leaves it: decodes nothing
                while in_flight:
                    hand_back(in_flight.pop())
                held.append(holdings(scheduler, rid))
                if i == 0:
                    chunks = sizes
                continue
            break
        planned = cfg.model_config.max_model_len
        cfg.model_config.max_model_len = tokens
        try:
            logged = get_max_concurrency_for_kv_cache_config(cfg, kv_cache_config)
            sized = [
                cdiv(g.kv_cache_spec.max_memory_usage_bytes(cfg), g.kv_cache_spec.page_size_bytes)
                for g in kv_cache_config.kv_cache_groups
            ]
        finally:
            cfg.model_config.max_model_len = planned
    assert len(set(held)) <= 1, held  # every request of the length holds the same
    return {
        "requests": len(held),
        "blocks_per_request": sum(held[0]) if held else None,
        "holdings": list(held[0]) if held else None,
        "peak_blocks": sum(peak) if peak else None,
        "chunks": chunks,
        "refused": refused,
        "free_blocks": pool.get_num_free_blocks(),
        "num_blocks": kv_cache_config.num_blocks,
        "groups": [type(g.kv_cache_spec).__name__ for g in kv_cache_config.kv_cache_groups],
        "vllm_max_concurrency": round(logged, 2),
        "sized_blocks": sized,  # per group, what its spec says one request of the length holds
        "in_flight_tokens": cfg.max_in_flight_tokens,
        "lookahead_tokens": cfg.num_lookahead_tokens,
        "cache_block_size": cfg.cache_config.block_size,
        "scheduler_block_size": scheduler.block_size,
        "hash_block_size": scheduler.hash_block_size,
        "cache_hit_alignment_tokens": kv_cache_config.cache_hit_alignment_tokens,
        "enable_caching": scheduler.kv_cache_manager.enable_caching,
    }


def requests_until_refused(inputs: GeometryInputs, contexts: list[int]) -> dict:
    """``{plan label: [count per context]}`` for the with-drafter plan and the
    target alone without speculation (each count: ``_count``'s numbers)."""
    out = {}
    plans = {"with_drafter": (inputs.has_drafter, inputs.num_speculative_tokens)}
    if inputs.has_drafter:
        plans["without_drafter"] = (False, 0)
    with serving_platform(inputs.capability_family):
        for label, (with_drafter, num_spec) in plans.items():
            out[label] = [_count(inputs, with_drafter, num_spec, n) for n in contexts]
    return out
