"""Prefix-cache hits from vLLM's own scheduler and KV cache manager, on the CPU.

Run as a script in a subprocess whose ``sys.path`` starts with the vLLM tree
under test (pristine or patched), with the repository on ``PYTHONPATH``::

    python overlay_prefix_hits.py VLLM_PARENT_DIR '[{"params": {...}, "prompt_tokens": L,
                                                    "shared_tokens": S}, ...]'

For each case it prints one ``PREFIX_HITS {json}`` line.

The KV cache configuration comes from ``support.engine_core.engine_core_plan``
(vLLM's ``EngineCore._initialize_kv_caches`` on the layer specs of the recipe). From
there everything is vLLM's, set up the way ``EngineCore.__init__`` does it:

* ``resolve_kv_cache_block_sizes`` gives the scheduler and hash block sizes;
* the request block hasher is ``get_request_block_hasher(hash_block_size,
  <prefix_caching_hash_algo>, vllm_config.num_hash_lookahead_tokens)``;
* vLLM's ``Scheduler`` is built on that config, and it builds its own
  ``KVCacheManager`` (``use_eagle`` = the speculative config's
  ``use_eagle_block_drop()``, the hash and scheduler block sizes above).

Request A (``prompt_tokens`` tokens, one output token) runs to completion
through ``Scheduler.schedule`` / ``update_from_output`` with a stand-in model
output (one sampled token per request), so prefill chunking, slot allocation,
block caching and freeing are vLLM's. Request B has the same first
``shared_tokens`` tokens and a different tail of the same length;
``kv_cache_manager.get_computed_blocks(B)`` is the hit vLLM reports.

Options per case: ``"eagle_drop": true`` builds the manager and the groups the
way vLLM does for an EAGLE-style drafter (the drafter's group flagged
``is_eagle_group``, the last matched block dropped) although DFlash does not
need it; ``"resend": true`` makes B identical to A.

The model config is the engine-core path's bare ``ModelConfig``; the few fields the
scheduler reads on top of planning (text-only, generate runner) are set here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys


def _scheduler(built, eagle_drop: bool):
    from transformers import PretrainedConfig
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.structured_output import StructuredOutputManager

    vllm_config = built.vllm_config
    model_config = vllm_config.model_config
    text = PretrainedConfig()  # text-only: no mrope, no multimodal inputs
    for key, value in {
        "hf_config": text,
        "hf_text_config": text,
        "multimodal_config": None,
        "runner_type": "generate",
        "is_diffusion": False,
        "skip_tokenizer_init": True,
    }.items():
        object.__setattr__(model_config, key, value)
    spec = vllm_config.speculative_config
    if eagle_drop:
        assert spec is not None, "eagle_drop needs the drafter"
        # What vLLM does for methods whose drafter KV depends on the next
        # token (needs_eagle_block_drop): get_global_kv_cache_groups flags the
        # groups holding draft layers, the scheduler passes use_eagle.
        object.__setattr__(spec, "needs_eagle_block_drop", lambda: True)
        object.__setattr__(spec, "disable_lookahead_block_hashes", True)
        draft = {
            name
            for group in built.scheduler.kv_cache_groups
            for name in group.layer_names
            if name.startswith("draft_model.")
        }
        for group in built.scheduler.kv_cache_groups:
            group.is_eagle_group = not draft.isdisjoint(group.layer_names)
    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(built.scheduler, vllm_config)
    scheduler = Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=built.scheduler,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=scheduler_block_size,
        hash_block_size=hash_block_size,
    )
    return scheduler, scheduler_block_size, hash_block_size


def _request(request_id: str, tokens: list[int], hasher):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=1)
    params.update_from_generation_config({}, eos_token_id=None)
    return Request(
        request_id=request_id,
        prompt_token_ids=tokens,
        sampling_params=params,
        pooling_params=None,
        block_hasher=hasher,
    )


def _run_to_completion(scheduler, request) -> list[int]:
    """Schedule ``request`` until it finishes; returns the chunk sizes."""
    from vllm.v1.outputs import ModelRunnerOutput

    # vLLM 0.34.0's output has no req_id_to_index (the index is the position in req_ids).
    indexed = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    scheduler.add_request(request)
    chunks = []
    for _ in range(10_000):
        out = scheduler.schedule()
        n = out.num_scheduled_tokens.get(request.request_id, 0)
        chunks.append(n)
        sampled = request.num_computed_tokens >= request.num_prompt_tokens
        index = {"req_id_to_index": {request.request_id: 0} if n else {}} if indexed else {}
        runner = ModelRunnerOutput(
            req_ids=[request.request_id] if n else [],
            sampled_token_ids=[[7] if sampled else []] if n else [],
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=None,
            **index,
        )
        scheduler.update_from_output(out, runner)
        if request.is_finished():
            return chunks
    raise AssertionError(f"request {request.request_id} did not finish: {chunks}")


def _case(case: dict) -> dict:
    from support.engine_core import engine_core_plan
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    built = engine_core_plan(case["params"])
    vllm_config = built.vllm_config
    eagle_drop = bool(case.get("eagle_drop"))
    scheduler, scheduler_block_size, hash_block_size = _scheduler(built, eagle_drop)
    manager = scheduler.kv_cache_manager
    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(hash_block_size, hash_fn, vllm_config.num_hash_lookahead_tokens)
    length, shared = case["prompt_tokens"], case["shared_tokens"]
    first = [1000 + i % 30000 for i in range(length)]
    if case.get("resend"):
        second = list(first)
    else:
        tail = case.get("tail_tokens", length - shared)
        second = first[:shared] + [50000 + i % 10000 for i in range(tail)]
    request_a = _request("a", first, hasher)
    chunks = _run_to_completion(scheduler, request_a)
    free_after_a = manager.block_pool.get_num_free_blocks()
    request_b = _request("b", second, hasher)
    blocks, hit_tokens, _ = manager.get_computed_blocks(request_b)
    return {
        "hit_tokens": hit_tokens,
        "hit_blocks": [len(group) for group in blocks.blocks],
        "chunks": chunks,
        "free_blocks_after_a": free_after_a,
        "num_blocks": built.scheduler.num_blocks,
        "enable_caching": manager.enable_caching,
        "use_eagle": manager.use_eagle,
        "eagle_group_ids": sorted(manager.coordinator.eagle_group_ids),
        "partial_hash_hits": manager.coordinator.enable_partial_hash_hits,
        "scheduler_block_size": scheduler_block_size,
        "hash_block_size": hash_block_size,
        "cache_hit_alignment_tokens": built.scheduler.cache_hit_alignment_tokens,
        "group_block_sizes": [g.kv_cache_spec.block_size for g in built.scheduler.kv_cache_groups],
        "draft_groups": [
            i
            for i, g in enumerate(built.scheduler.kv_cache_groups)
            if all(n.startswith("draft_model.") for n in g.layer_names)
        ],
        "vllm_file": sys.modules["vllm"].__file__,
    }


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    logging.basicConfig(level=logging.WARNING)
    cases = json.loads(sys.argv[2])
    for case in cases if isinstance(cases, list) else [cases]:
        print("PREFIX_HITS " + json.dumps(_case(case)), flush=True)


if __name__ == "__main__":
    main()
