"""Prefix-cache hits measured with vLLM 0.34.0's own scheduler and KV cache
manager, pristine vs patched, for the default recipe with prefix caching on.

vLLM serves GLM-5.3-Flash with prefix caching on by default, which puts the
KDA state in ``mamba_cache_mode="align"``. The KV cache configuration comes
from vLLM's planner (tests/support/engine_core.py, EngineCore._initialize_kv_caches);
the scheduler and its KVCacheManager are vLLM's, built as EngineCore builds
them (tests/overlay_prefix_hits.py). Request A runs to completion and is
freed; request B shares A's first S tokens and has another tail; the hit is
what ``get_computed_blocks(B)`` reports.

The rules the expectations follow (vLLM 0.34.0):

* hash block h: one group -> its block; several -> the GCD of the prefix-
  cacheable groups' blocks (resolve_kv_cache_block_sizes). Hits land on h
  when h divides every Mamba block (partial hash hits), else on the scheduler
  block (LCM of the group blocks).
* A Mamba group keeps one state per request by default
  (prefix_cache_retention_interval=0): the prompt's checkpoint, at
  ``(L_A - 1) // a * a`` for hit alignment a (get_mamba_prefill_checkpoint_position,
  one token left to recompute for logits).
* So B hits ``c = (L_A - 1) // a * a`` when c <= S and c <= L_B - 1, else 0.

The alignment ``a`` the final assertions use is the one the geometry
simulator reports for the plan (``prefix_cache.hit_alignment_tokens``,
``vllm_behaviour`` stock or overlay); ``test_arithmetic`` derives it by hand.
"""

from __future__ import annotations

import pytest
from overlay_helpers import (
    RECIPE_CONFIGS,
    copy_tree,
    oracle_python,
    prefix_hits,
    pristine_dir,
    recipe_params,
    run_apply,
)

from geometry.model.inputs import GeometryInputs
from geometry.plan.simulate import simulate

pytestmark = pytest.mark.oracle

# The GB300 recipe's target block B with prefix caching on (the hybrid block:
# fp8 MLA latent 512 B/token, index_kpool 4 -> kernel block 128, KDA state
# padded under it; the same 9,216 the planning tests use for mode none).
B = 9216
LATENT_BYTES_PER_TOKEN = 512  # kv_lora_rank 512, fp8, qk_rope_head_dim 0
# BF16 DFlash2 drafter at TP1: 8 KV heads x head_dim 128 x (K + V) x 2 bytes.
DRAFT_BYTES_PER_TOKEN = 8 * 128 * 2 * 2  # 4,096
# Patch 0001: the drafter's page equals the target's MLA page P = B x 512 B.
DRAFT_BLOCK_PATCHED = B * LATENT_BYTES_PER_TOKEN // DRAFT_BYTES_PER_TOKEN  # 1,152 = B / 8

# B shares 2 target blocks and 5 fitted drafter blocks with A: 24,192 tokens,
# on the overlay's hash boundary, 5,760 tokens past the last target boundary.
SHARED = 2 * B + 5 * DRAFT_BLOCK_PATCHED
PROMPT_A = SHARED + 300  # A's checkpoint lands at SHARED under 1,152 alignment
TAIL_B = 2000


def _checkpoint(length: int, alignment: int) -> int:
    """(L - 1) // a * a: the prompt's retained Mamba state."""
    return (length - 1) // alignment * alignment


def _expected_hit(alignment: int) -> int:
    c = _checkpoint(PROMPT_A, alignment)
    return c if c <= SHARED and c <= SHARED + TAIL_B - 1 else 0


def _reported(behaviour: str, drafter: bool):
    """The simulator's prefix_cache for the recipe's plan (TP1, num_spec 7,
    prefix caching on); without the drafter: the target alone with the same
    num_spec, as the harness runs it."""
    import json

    report = simulate(
        GeometryInputs(
            target_config=json.loads((RECIPE_CONFIGS / "target.config.json").read_text()),
            drafter_config=json.loads((RECIPE_CONFIGS / "drafter.config.json").read_text()),
            tensor_parallel_size=1,
            kv_cache_dtype="fp8",
            drafter_kv_cache_dtype="auto",
            num_speculative_tokens=7,
            capability_family=100,
            mamba_cache_mode="align",
            enable_prefix_caching=True,
            kv_cache_memory_bytes=150 << 30,
            vllm_behaviour=behaviour,
            drafter_attention_backend="FLASH_ATTN",
        )
    )
    plan = report.with_drafter if drafter else report.target_only_same_spec
    return plan.prefix_cache


@pytest.fixture(scope="module")
def hits(tmp_path_factory):
    pristine = pristine_dir()
    python = oracle_python()
    patched = copy_tree(pristine, tmp_path_factory.mktemp("hits-patched") / "site")
    done = run_apply("--site-packages", patched)
    assert done.returncode == 0, done.stderr
    base = dict(
        recipe_params(),
        tp=1,
        num_spec=7,
        mamba_cache_mode="align",
        # GB300, bf16 KDA, head_dim 128, bounded gate: vLLM picks FlashKDA,
        # which checkpoints the KDA state inside a prefill chunk.
        kda_prefill_backend="flashkda",
        kv_memory_gib=150,
    )
    case = {"prompt_tokens": PROMPT_A, "shared_tokens": SHARED, "tail_tokens": TAIL_B}
    cases = {
        "drafter": dict(case, params=dict(base, with_drafter=True)),
        "no_drafter": dict(case, params=dict(base, with_drafter=False)),
        "drafter_eagle_drop": dict(case, params=dict(base, with_drafter=True), eagle_drop=True),
    }
    out = {}
    for name, site in (("stock", pristine), ("patched", patched)):
        results = prefix_hits(site, list(cases.values()), python)
        out[name] = dict(zip(cases, results))
    return out


def test_arithmetic():
    """The hand derivation agrees with the simulator's report."""
    assert _reported("stock", True).hit_alignment_tokens == B
    assert _reported("overlay", True).hit_alignment_tokens == DRAFT_BLOCK_PATCHED
    assert _reported("overlay", False).hit_alignment_tokens == B
    assert DRAFT_BLOCK_PATCHED == 1152 and B % DRAFT_BLOCK_PATCHED == 0
    assert SHARED == 24192 and PROMPT_A == 24492
    # 1,152 alignment: (24,492 - 1) // 1,152 = 21 -> 24,192 = SHARED.
    assert _expected_hit(DRAFT_BLOCK_PATCHED) == 24192
    # 9,216 alignment: (24,492 - 1) // 9,216 = 2 -> 18,432 <= SHARED.
    assert _expected_hit(B) == 18432


def test_stock_hits_land_on_the_target_block(hits):
    for case in ("drafter", "no_drafter"):
        r = hits["stock"][case]
        # Stock: every prefix-cacheable group has block B -> h = B, a = B.
        assert r["enable_caching"] and not r["use_eagle"] and r["eagle_group_ids"] == []
        assert (r["hash_block_size"], r["scheduler_block_size"]) == (B, B), case
        assert r["cache_hit_alignment_tokens"] == B
        assert r["hit_tokens"] == _expected_hit(B) == 18432, case


def test_overlay_hits_land_on_the_drafter_block(hits):
    r = hits["patched"]["drafter"]
    # Groups: KDA and MLA at B, the drafter at B/8, the kpool tail ring (not
    # prefix-cacheable). h = gcd(B, B/8) = 1,152, which divides the KDA block
    # B: partial hash hits, a = 1,152; the scheduler block stays lcm = B.
    assert DRAFT_BLOCK_PATCHED in r["group_block_sizes"]
    assert (r["hash_block_size"], r["scheduler_block_size"]) == (DRAFT_BLOCK_PATCHED, B)
    assert r["partial_hash_hits"] and r["cache_hit_alignment_tokens"] == DRAFT_BLOCK_PATCHED
    # DFlash drafts from target hidden states only: no EAGLE drop, no group
    # flagged as the drafter's (vLLM 0.34.0, as 0.33.0: needs_eagle_block_drop() is false).
    assert not r["use_eagle"] and r["eagle_group_ids"] == []
    assert r["hit_tokens"] == _expected_hit(DRAFT_BLOCK_PATCHED) == SHARED
    # The drafter's group hits SHARED / 1,152 = 21 blocks, the target's 2 full
    # blocks of B (the rest of the hit is in the KDA checkpoint).
    (draft,) = r["draft_groups"]
    assert r["hit_blocks"][draft] == SHARED // DRAFT_BLOCK_PATCHED == 21


def test_without_drafter_the_overlay_changes_nothing(hits):
    stock, patched = hits["stock"]["no_drafter"], hits["patched"]["no_drafter"]
    for key in ("hit_tokens", "hash_block_size", "scheduler_block_size", "hit_blocks"):
        assert stock[key] == patched[key], key
    assert patched["hit_tokens"] == _expected_hit(B)


def test_eagle_style_drop_on_a_dflash_drafter(hits):
    """What EAGLE-style handling (the drafter's group flagged is_eagle_group,
    the manager built with use_eagle) would do to a DFlash drafter's hits.

    With the drop, A's prompt checkpoint is taken one scheduler block below
    its last full one (get_mamba_prefill_checkpoint_position with
    drop_eagle_block: L_A // B * B - B), and the lookup drops B's last
    matched block: the hit falls to 9,216 on both trees. On the overlay that
    throws away 14,976 of the 24,192 shareable tokens; it would be wrong for
    DFlash (its drafter KV does not depend on the next token), and vLLM
    0.34.0 does not apply it to DFlash."""
    dropped = PROMPT_A // B * B - B
    assert dropped == 9216
    for name in ("stock", "patched"):
        r = hits[name]["drafter_eagle_drop"]
        assert r["use_eagle"] and r["eagle_group_ids"] == r["draft_groups"], name
        assert r["hit_tokens"] == dropped, name
    assert hits["patched"]["drafter"]["hit_tokens"] - dropped == 14976


def test_requests_ran_through_the_scheduler(hits):
    """A's prompt was chunked by vLLM's scheduler (8,192-token budget, chunks
    clipped to Mamba block boundaries) and finished."""
    for name in ("stock", "patched"):
        r = hits[name]["drafter"]
        assert sum(r["chunks"]) == PROMPT_A
        assert r["free_blocks_after_a"] == r["num_blocks"] - 1  # all but the null block


@pytest.mark.parametrize("tree,behaviour", [("stock", "stock"), ("patched", "overlay")])
@pytest.mark.parametrize("case,drafter", [("drafter", True), ("no_drafter", False)])
def test_hits_equal_what_the_report_predicts(hits, tree, behaviour, case, drafter):
    r = hits[tree][case]
    report = _reported(behaviour, drafter)
    assert report.enabled and report.can_hit
    assert (report.hash_block_size, report.scheduler_block_size) == (
        r["hash_block_size"],
        r["scheduler_block_size"],
    )
    assert report.hit_alignment_tokens == r["cache_hit_alignment_tokens"]
    assert r["hit_tokens"] == _expected_hit(report.hit_alignment_tokens)
