"""Prefix caching in the simulated plan: the default recipe's hash and scheduler blocks and the KDA
state blocks worked out by hand from its configs, the gate's prefix-cache rule and its JSON
(standard library only).
"""

from __future__ import annotations

import json
import math

import default_recipe_figures as F  # noqa: E402
import geometry_cases as C  # noqa: E402
import pytest
from default_recipe_figures import PrefixCaching  # noqa: E402
from support.simulate_cases import default_recipe_fields, kimi_input

from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.plan.concurrency import concurrency, request_prefill  # noqa: E402
from geometry.plan.simulate import simulate  # noqa: E402
from geometry.verdict.gate import check  # noqa: E402
from geometry.verdict.table import render_text, to_json  # noqa: E402
from stackbuild.core.gate import gate_input  # noqa: E402
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe  # noqa: E402

GATE_MODULE = "geometry.gate_main"
COMPAT_SCRIPT = "sim_glm5_drafter_hades.py"  # the gate's name in the published images


def _inputs(data: dict) -> GeometryInputs:
    return GeometryInputs.from_json(data)


def _prefix_caching_by_hand(on: bool) -> PrefixCaching:
    """The PrefixCaching figures worked out from the recipe's fields and vLLM 0.33.0's rules
    (tests/default_recipe_figures.py says each step in words)."""
    fields = default_recipe_fields()
    t, d, raw = fields["t"], fields["d"], fields["raw"]
    max_model_len, num_spec = t["max_position_embeddings"], raw["num_speculative_tokens"]
    assert raw["max_model_len"] in (None, max_model_len)
    block = F.OVERLAY.target_block  # worked out by hand in the test above
    drafter_block, blocks = F.OVERLAY.drafter_block, F.OVERLAY.blocks
    window = d["sliding_window"]
    batched, batches = F.BATCHED_TOKENS, F.BATCHES_IN_FLIGHT
    assert raw["max_num_batched_tokens"] == batched  # what `vllm serve` picks on a GB300
    lookahead = num_spec + 1  # DFlash: VllmConfig.num_lookahead_tokens
    in_flight_max = batches * batched
    ring, hash_grid = 1, math.gcd(block, drafter_block)
    prompt = max_model_len - 1  # a request of max_model_len tokens: the prompt and the token it generates
    slots = min(prompt + lookahead, max_model_len)
    mla = -(-slots // block)
    window_table = -(-slots // drafter_block)
    window_sized = -(-min(window - 1 + in_flight_max, max_model_len) // drafter_block) + 1
    checkpoint = 1  # FlashKDA on a GB300 for this bf16 model (test_concurrency.py checks the choice)
    if not on:
        kda_block = max_model_len  # MambaSpec in "none": the block is max_model_len
        sized = 1 + num_spec
        chunks = -(-prompt // batched)
        last_start = (chunks - 1) * batched
        processed = last_start - (batches - 1) * batched  # the step before still in flight
        kda_held = -(-(slots + kda_block * num_spec) // kda_block)
        window_held = window_table - (processed - (window - 1)) // drafter_block
        admission = (
            -(-prompt // block) + F.KDA_GROUPS * kda_held + ring + min(-(-prompt // drafter_block), window_sized)
        )
        scheduler, hash_block, hits, hits_stock = math.lcm(kda_block, block, 16, drafter_block), None, None, None
    else:
        sized = 2 + num_spec + checkpoint
        # every chunk but the last ends on the cache block; the last starts where the rest fits one step
        last_start = (prompt - batched) // block * block + block
        assert prompt - last_start <= batched < prompt - last_start + block
        chunks = last_start // block + 1
        processed = last_start - block  # the step before (one block) still in flight
        # the checkpoint FlashKDA exports inside the last chunk: on the hash grid, a multiple of 16 tokens
        # from the chunk's start, in a later block than the start's
        position = (prompt - 1) // hash_grid * hash_grid
        assert last_start % hash_grid == 0 and last_start < position < prompt and (position - last_start) % 16 == 0
        assert -(-prompt // block) - 2 > (last_start - 1) // block
        # states from the processed tokens' block on: the chunk ends last_start - block, last_start, prompt
        first = (processed - 1) // block
        states = {(e - 1) // block for e in (last_start - block, last_start, prompt) if (e - 1) // block >= first}
        kda_held = len(states) + num_spec + checkpoint
        window_held = window_table - (processed - (window - 1)) // drafter_block
        admission = (
            -(-prompt // block)
            + F.KDA_GROUPS * min(-(-prompt // block) + num_spec, 1 + checkpoint + num_spec)
            + ring
            + min(-(-prompt // drafter_block), window_sized)
        )
        scheduler, hash_block = math.lcm(block, 16, drafter_block), hash_grid
        hits, hits_stock = hash_grid, math.gcd(block, F.STOCK.drafter_block)
    holds = mla + F.KDA_GROUPS * kda_held + ring + window_held
    sized_total = -(-max_model_len // block) + F.KDA_GROUPS * sized + ring + window_sized
    pool = blocks - 1
    return PrefixCaching(
        scheduler_block=scheduler,
        hash_block=hash_block,
        hits_every_overlay=hits,
        hits_every_stock=hits_stock,
        kda_state_blocks_sized=sized,
        blocks_one_1m_request_sized=sized_total,
        vllm_max_concurrency_1m=round(blocks / sized_total, 2),
        prefill_chunks_1m=chunks,
        kda_state_blocks_held=kda_held,
        drafter_window_blocks_held=window_held,
        blocks_one_1m_request_holds=holds,
        admission_blocks_1m=admission,
        requests_of_1m_at_once=1 + (pool - max(admission, holds)) // holds,
    )


@pytest.mark.parametrize("on", [False, True])
def test_default_recipe_prefix_caching_from_arithmetic(on):
    """The default recipe's prefix-caching figures compared whole with vLLM 0.33.0's rules worked out
    here, and the simulator's plans and requests at once against every figure."""
    figures = F.PREFIX_ON if on else F.PREFIX_OFF
    assert figures == _prefix_caching_by_hand(on)
    fields = default_recipe_fields()
    t, raw = fields["t"], fields["raw"]
    assert F.MAX_MODEL_LEN == t["max_position_embeddings"] == raw["max_model_len"]
    assert (F.NUM_SPEC, F.LOOKAHEAD) == (raw["num_speculative_tokens"], raw["num_speculative_tokens"] + 1)
    assert F.POOL == raw["kv_cache_memory_bytes"] // F.OVERLAY.bytes_per_block_with - 1  # less the null block

    for behaviour, hits in (("overlay", figures.hits_every_overlay), ("stock", figures.hits_every_stock)):
        raw = gate_input(load_recipe(DEFAULT_RECIPE), vllm_behaviour=behaviour).to_json()
        inputs = _inputs(dict(raw, **C.prefix_caching(on)))
        report = simulate(inputs)
        plan = report.with_drafter
        pc = plan.prefix_cache
        assert (pc.enabled, pc.can_hit) == (on, on)
        assert (pc.hit_alignment_tokens if on else None) == hits
        if behaviour == "overlay":
            assert pc.scheduler_block_size == figures.scheduler_block
            assert (pc.hash_block_size if on else None) == figures.hash_block
            kda = [g for g in plan.groups if g.spec_class == "MambaSpec"]
            assert len(kda) == F.KDA_GROUPS and {g.per_request.fixed for g in kda} == {figures.kda_state_blocks_sized}
            # the plan does not change with the mode
            assert (plan.block_size, plan.num_blocks, plan.tokens_fit) == (
                F.OVERLAY.target_block,
                F.OVERLAY.blocks,
                F.OVERLAY.kv_token_slots,
            )
            c = concurrency(report, inputs)
            assert c.in_flight_tokens == F.BATCHES_IN_FLIGHT * F.BATCHED_TOKENS
            fit = c.fits["with_drafter"][0]
            assert fit.tokens == F.MAX_MODEL_LEN
            assert (
                fit.vllm_blocks_per_request,
                fit.vllm_max_concurrency,
                fit.prefill_chunks,
                fit.blocks_per_request,
                fit.admission_blocks,
                fit.admitted,
            ) == (
                figures.blocks_one_1m_request_sized,
                figures.vllm_max_concurrency_1m,
                figures.prefill_chunks_1m,
                figures.blocks_one_1m_request_holds,
                figures.admission_blocks_1m,
                figures.requests_of_1m_at_once,
            )
            held = request_prefill(plan, inputs, "with_drafter", F.MAX_MODEL_LEN).held
            by_role = {g.roles: n for g, n in zip(plan.groups, held)}
            assert {n for g, n in zip(plan.groups, held) if g.spec_class == "MambaSpec"} == {
                figures.kda_state_blocks_held
            }
            assert by_role[("sliding_window",)] == figures.drafter_window_blocks_held
        # the verdict: the overlay passes, stock fails, in both modes
        assert check(report).passed is (behaviour == "overlay")


def test_prefix_cache_gate():
    # the default recipe with the series: drafter block 9216 x 512 / 4096 = 1152
    # divides the target block 9216; hits every 1152 tokens
    overlay = simulate(_inputs(C.recipe_input("overlay", **C.prefix_caching(True))))
    v = check(overlay)
    assert v.passed, v.reasons
    pc = overlay.with_drafter.prefix_cache
    assert (pc.enabled, pc.hit_alignment_tokens, pc.can_hit) == (True, 1152, True)
    assert "prefix caching: on, hits every 1,152 tokens" in render_text(overlay, v)
    # Kimi Linear with a one-layer bf16 drafter: 8 KV heads x 128 x (K+V) x 2 B =
    # 4096 B/token, P = 4096 x 576 (fp8 MLA latent) -> drafter block 576, which
    # does not divide 4096; the scheduler block is lcm(4096, 576) = 36864
    kimi = simulate(_inputs(kimi_input("overlay", 1, True, drafter_kv_cache_dtype="bfloat16")))
    vk = check(kimi)
    assert vk.reasons == (
        "prefix caching: drafter block 576 does not divide the target block 4096 "
        "(hash block 64, scheduler block 36864)",
        "prefix caching: cache hits land every 36,864 tokens, more than the target block 4096",
    )
    # the same with prefix caching off passes (capacity holds, see above) and says so
    off = simulate(_inputs(kimi_input("overlay", 1, False, drafter_kv_cache_dtype="bfloat16")))
    voff = check(off)
    assert voff.passed
    assert "prefix caching: OFF (no cache hits" in render_text(off, voff)


def test_prefix_cache_in_json():
    report = simulate(_inputs(C.recipe_input("stock", **C.prefix_caching(True))))
    data = json.loads(json.dumps(to_json(report, check(report)), default=str))
    for label in ("with_drafter", "without_drafter", "target_only_same_spec"):
        assert set(data["report"][label]["prefix_cache"]) == {
            "enabled",
            "hash_block_size",
            "scheduler_block_size",
            "hit_alignment_tokens",
            "can_hit",
        }
