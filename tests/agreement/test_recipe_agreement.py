"""The recipes' gate inputs, worked-by-hand GB10 and prefix-cache figures, the post's scenario,
odd inputs and the capacity vLLM counts: simulator vs vLLM's own code, field by field (needs an
importable vLLM; tests/agreement/test_plan_agreement.py says how to run the oracle)."""

from __future__ import annotations

import math
import random
import sys

import pytest
from infra.fixtures import in_ci
from support.repo import REPO

pytestmark = pytest.mark.oracle

try:
    import torch  # noqa: F401
    import vllm.v1.core.kv_cache_planning  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise  # CI=true: the oracle is required, never skipped
    pytest.skip(f"vLLM's own planning code is not importable ({exc}): run `make oracle`", allow_module_level=True)

import geometry_cases as C  # noqa: E402
from plan_agreement import BEHAVIOUR, agree  # noqa: E402,F401

from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.oracle.plan import (  # noqa: E402
    compare_reports,
    plan_with_vllm,
)
from geometry.plan.simulate import simulate  # noqa: E402
from geometry.verdict.gate import check  # noqa: E402
from geometry.vllm_versions import release  # noqa: E402

RECIPES = sorted((REPO / "recipes").glob("*/recipe.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_recipe_gate_input_agrees_with_vllm(path):
    """Every recipe's own gate input, as the build writes it."""
    from stackbuild.core.gate import gate_input
    from stackbuild.core.recipe import load_recipe

    # the recipe's input on the oracle's release (a recipe pins the default one)
    data = dict(gate_input(load_recipe(path), vllm_behaviour=BEHAVIOUR).to_json(), vllm_version=C.ORACLE_VERSION)
    sim, vllm, diffs = agree(data)
    assert not diffs, "\n".join(diffs[:20])
    assert check(vllm).passed is (BEHAVIOUR == "overlay")


def _gb10_tp2_block() -> int:
    """GB10, TP2, num_speculative_tokens 7, by hand (_align_hybrid_block_size).
    KDA state per rank: conv (3 x 64 heads x 128 / 2) x (4 - 1 + 7) x bf16 +
    recurrent 32 x 128 x 128 x fp32 = 245,760 + 2,097,152.  Alignment: the
    first non-SSM backend is the sparse indexer, 64-state pages only on
    family 120 -> 4 x 64 = 256 tokens.  Bytes per token: the 1-token
    MLAAttentionSpec built from cache_dtype "fp8_ds_mla" (uint8, no
    state_content_bytes) = 512."""
    state = 3 * 64 * 128 // 2 * 10 * 2 + 32 * 128 * 128 * 4
    assert state == 2_342_912
    return 256 * -(-state // (256 * 512))


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_gb10_tp2_by_hand(prefix_caching):
    """vLLM's own answer for the GB10 recipe's shape (bf16 drafter KV, the
    only drafter KV FLASH_ATTN takes there) against hand arithmetic."""
    sim, vllm, diffs = agree(
        C.recipe_input(
            BEHAVIOUR,
            capability_family=120,
            tensor_parallel_size=2,
            drafter_kv_cache_dtype="auto",
            **C.prefix_caching(prefix_caching),
        )
    )
    assert not diffs, "\n".join(diffs[:20])
    block = _gb10_tp2_block()
    assert block == 4608
    # fp8_ds_mla: 512 NoPE + 16 scales + 128 RoPE bytes per token; vLLM 0.34.0 asks the SM120
    # implementation, whose row for a 512-wide latent without RoPE is 512 + 16 scales (528)
    row = 528 if release(C.ORACLE_VERSION).sm120_ropeless_ds_mla_row_bytes else 656
    mla_page = block * row
    indexer_page = block // 4 * (128 + 4)  # one fp8 key + 4 scale bytes per kpool-4 state
    # block stride: the lcm of the MLA rows (64 x row) and the indexer's
    # MultipleOf(256) (its page at 256 tokens: 64 states x 132)
    stride = math.lcm(64 * row, 64 * 132)
    target_widest = 11 * (mla_page + indexer_page)
    # no exact fit for the drafter: P / 2048 B per token = 1476 is not a multiple
    # of FLASH_ATTN's 16, so both behaviours keep the whole block: 4 KV heads
    # per rank x (128 + 128) x 2 bytes, 5 layers
    drafter_group = 5 * block * 4 * 256 * 2
    assert mla_page % 2048 == 0 and (mla_page // 2048) % 16
    for plan, widest in (
        (vllm.with_drafter, max(target_widest, drafter_group)),
        (vllm.target_only_same_spec, target_widest),
    ):
        assert plan.block_size == block
        assert plan.target_attention_page == mla_page == {656: 3_022_848, 528: 2_433_024}[row]
        assert plan.mamba_page_size_padded == block * 512
        assert plan.bytes_per_block == stride * -(-widest // stride)
    # 528: the target's 11 x (2,433,024 + 152,064) = 28,435,968 B rounds up to 842 strides of
    # 33,792; the drafter's 47,185,920 B to 1,397
    assert vllm.target_only_same_spec.bytes_per_block == {656: 36_022_272, 528: 28_452_864}[row]
    assert vllm.with_drafter.bytes_per_block == {656: 48_491_520, 528: 47_207_424}[row]
    assert not check(vllm).passed  # the drafter's group widens every block


def _recipe_block(num_spec: int) -> int:
    """The default recipe's block size by hand (_align_hybrid_block_size):
    KDA state = conv (3 x 64 heads x 128) x (kernel 4 - 1 + num_spec) x bf16
    + recurrent 64 x 128 x 128 x fp32; MLA latent 512 B per token (fp8,
    kv_lora_rank 512, no rope); block = 128 x ceil(state / (128 x 512))."""
    state = 3 * 64 * 128 * (3 + num_spec) * 2 + 64 * 128 * 128 * 4
    return 128 * -(-state // (128 * 512))


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_recipe_prefix_cache_by_hand(prefix_caching):
    """vLLM's own answer for the default recipe against hand arithmetic."""
    sim, vllm, diffs = agree(C.recipe_input(BEHAVIOUR, **C.prefix_caching(prefix_caching)))
    assert not diffs, "\n".join(diffs[:20])
    block = _recipe_block(7)
    assert block == 9216
    # the stock drafter takes the whole block (FLASH_ATTN: multiples of 16);
    # the series gives it the MLA page's worth of bf16 tokens: 8 heads x 128 x
    # (K+V) x 2 bytes = 4096 B per token
    drafter_block = block if BEHAVIOUR == "stock" else block * 512 // (8 * 128 * 2 * 2)
    tail_ring = 16  # kpool 4, span 4 + 7 -> 4 x next power of 2 of ceil(11 / 4)
    plan = vllm.with_drafter
    assert plan.block_size == block
    assert {g.block_size for g in plan.groups if g.spec_class == "SlidingWindowSpec"} == {drafter_block}
    pc = plan.prefix_cache
    assert pc.enabled is prefix_caching
    if prefix_caching:
        # mamba block = attention block; hashes every gcd of the cacheable
        # blocks (the tail ring opts out); hits land on the hash block when the
        # mamba block is larger and the sliding-window drafter's block is the
        # hash block, else on the scheduler block
        assert pc.scheduler_block_size == math.lcm(block, tail_ring, drafter_block) == block
        assert pc.hash_block_size == math.gcd(block, drafter_block) == drafter_block
        assert pc.hit_alignment_tokens == drafter_block
        assert pc.can_hit
    else:
        # mamba block = max_model_len (2^20): lcm(2^20, 9216 = 2^10 x 9) = 9 x 2^20
        assert pc.scheduler_block_size == math.lcm(1 << 20, block, tail_ring) == 9 << 20
        assert pc.hash_block_size == pc.hit_alignment_tokens == 9 << 20
        assert not pc.can_hit
    # without the drafter (num_spec 0) the block is smaller: 8576 tokens
    alone = vllm.without_drafter
    assert alone.block_size == _recipe_block(0) == 8576
    if prefix_caching:
        assert alone.prefix_cache.hit_alignment_tokens == 8576


def test_recipe_agrees_and_numbers():
    sim, vllm, diffs = agree(C.recipe_input(BEHAVIOUR))
    assert not diffs, "\n".join(diffs[:20])
    if BEHAVIOUR == "stock":
        # pristine vLLM: the drafter's group is the widest and costs blocks
        v = check(vllm)
        assert not v.passed
        assert vllm.with_drafter.bytes_per_block > vllm.target_only_same_spec.bytes_per_block


def test_post_scenario_agrees():
    sim, vllm, diffs = agree(C.post_scenario(BEHAVIOUR))
    assert not diffs, "\n".join(diffs[:20])
    # the post's MLA page (num_spec 0, index_kpool 4) computed by vLLM itself
    assert vllm.with_drafter.target_attention_page == 4_390_912


def test_overlay_simulation_vs_pristine_vllm_differs_only_in_drafter():
    """On a pristine tree the overlay-mode simulation must disagree exactly in
    the drafter's block sizes and what follows from them."""
    if BEHAVIOUR != "stock":
        pytest.skip("pristine-tree check")
    inputs = GeometryInputs.from_json(C.recipe_input("overlay"))
    diffs = compare_reports(simulate(inputs), plan_with_vllm(inputs))
    assert diffs
    assert all(d.startswith("with_drafter") for d in diffs)


def test_cli_oracle_exit_codes(tmp_path):
    """In-image entry point with --oracle against the vLLM on sys.path."""
    import json
    import subprocess

    if BEHAVIOUR != "stock":
        pytest.skip("pristine-tree check")
    cli = REPO / "geometry" / "sim_glm5_drafter_hades.py"
    p = tmp_path / "gate-input.json"
    p.write_text(json.dumps(C.recipe_input("stock")))

    def run(*a):
        return subprocess.run(
            [sys.executable, str(cli), "--input", str(p), "--oracle", "--json", *a],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )

    stock = run("--behaviour", "stock")
    assert stock.returncode == 1, stock.stderr[-2000:]
    assert json.loads(stock.stdout)["oracle"]["agrees"]
    claimed = run("--behaviour", "overlay")  # the pristine tree is not the overlay
    assert claimed.returncode == 17, claimed.stderr[-2000:]


def test_kimi_linear_recipe_agrees():
    """Kimi Linear with the DFlash2-style drafter (stock 0.33.0 raises in
    unify: the MLA page does not divide the drafter's) and alone."""
    for drafter, prefix_caching in [(d, p) for d in (C.recipe_configs()[1], None) for p in (False, True)]:
        data = C.recipe_input(
            BEHAVIOUR,
            target_config=C.kimi_linear_config(),
            kv_cache_dtype="fp8",
            drafter_config=drafter,
            **C.prefix_caching(prefix_caching),
        )
        sim, vllm, diffs = agree(data)
        assert not diffs, "\n".join(diffs[:20])
        assert vllm.target_only_same_spec.target_attention_page == 4096 * 576
        if BEHAVIOUR == "stock" and drafter is not None:
            assert vllm.with_drafter.error.startswith("NotImplementedError")


def _qwen3_next(**changes) -> dict:
    t = C.qwen3_next_target(random.Random(0))
    t.update(changes)
    return {k: v for k, v in t.items() if v is not None}


def _kimi(edit) -> dict:
    t = C.kimi_linear_config(12, 4)
    edit(t["linear_attn_config"])
    return t


_, _DRAFTER = C.recipe_configs()
# Well-typed but odd inputs property tests found (tests/test_config_properties.py) that vLLM loads and
# plans, or refuses with its own assert: the simulator must say the same.
ODD_INPUTS = [
    ("qwen3-next-default-kv-heads", dict(target_config=_qwen3_next(num_key_value_heads=None))),
    (
        "qwen3-next-default-kv-heads-tp2",
        dict(target_config=_qwen3_next(num_key_value_heads=None), tensor_parallel_size=2),
    ),
    (
        "qwen3-next-heads-not-dividing-tp",
        dict(target_config=_qwen3_next(num_attention_heads=6, num_key_value_heads=2), tensor_parallel_size=4),
    ),
    (
        "drafter-heads-not-dividing-tp",
        dict(drafter_config=dict(_DRAFTER, num_attention_heads=12, num_key_value_heads=4), tensor_parallel_size=8),
    ),
    (
        "drafter-kv-heads-not-dividing-tp",
        dict(drafter_config=dict(_DRAFTER, num_attention_heads=40, num_key_value_heads=5), tensor_parallel_size=4),
    ),
    ("kimi-empty-full-attn-layers", dict(target_config=_kimi(lambda lac: lac.__setitem__("full_attn_layers", [])))),
    ("kimi-overlapping-layer-lists", dict(target_config=_kimi(lambda lac: lac["kda_layers"].append(4)))),
]


@pytest.mark.parametrize("name,changes", ODD_INPUTS, ids=[c[0] for c in ODD_INPUTS])
def test_odd_inputs_agree_with_vllm(name, changes):
    data = C.recipe_input(BEHAVIOUR, kv_cache_dtype="fp8", **C.prefix_caching(False), **changes)
    if "target_config" in changes:
        data.update(
            drafter_config=None, drafter_kv_cache_dtype=None, num_speculative_tokens=0, drafter_attention_backend=None
        )
    _, _, diffs = agree(data)
    assert not diffs, "\n".join(diffs[:20])


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_capacity_counts_what_vllm_counts(prefix_caching):
    """geometry/plan/capacity.py's premise, from vLLM's own per-request block count
    (get_max_concurrency_for_kv_cache_config): a group that keeps every token
    draws cdiv(max_model_len, block) blocks; every other group a fixed number."""
    from geometry.kv.kv_spec import spec_kind
    from geometry.oracle.plan import blocks_per_request

    kimi_drafter = C.recipe_configs()[1] if BEHAVIOUR == "overlay" else None
    cases = [
        C.recipe_input(BEHAVIOUR, **C.prefix_caching(prefix_caching)),
        C.recipe_input(
            BEHAVIOUR,
            target_config=C.kimi_linear_config(),
            kv_cache_dtype="fp8",
            drafter_config=kimi_drafter,
            **C.prefix_caching(prefix_caching),
        ),
    ]
    for data in cases:
        long, short = (
            blocks_per_request(GeometryInputs.from_json(dict(data, max_model_len=n))) for n in (1 << 20, 1 << 19)
        )
        assert [c for c, _, _ in long] == [c for c, _, _ in short]
        assert any(spec_kind(c).keeps_every_token for c, _, _ in long)
        for (cls, block, n_long), (_, block_short, n_short) in zip(long, short):
            if spec_kind(cls).keeps_every_token:
                assert (n_long, n_short) == (-(-(1 << 20) // block), -(-(1 << 19) // block_short))
            else:
                assert n_long == n_short, (cls, n_long, n_short)


# Planned in a fresh interpreter per platform: vLLM resolves its platform once per process.
# sys.path starts with the working directory (this checkout), so it plans with this code.
