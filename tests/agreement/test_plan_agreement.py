"""Simulator vs vLLM's own code, field by field.

Needs an importable vLLM (0.33.0, CPU torch is enough): run with the oracle
venv, e.g. ``.venv/bin/python -m pytest tests/test_geometry_oracle.py`` after ``make oracle``.
Point PYTHONPATH at a patched vLLM tree to test the overlay instead
(GEOMETRY_ORACLE_BEHAVIOUR=overlay).  The matrix is a seeded sample of the
generated scenarios (GEOMETRY_ORACLE_N, default 300; GEOMETRY_ORACLE_SEED).
A disagreement is a bug in one of them: fix the simulator, or document the
vLLM bug in geometry/README.md.
"""

from __future__ import annotations

import itertools
import math
import os
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
import refusal_reasons as R  # noqa: E402

from geometry import gate_main  # noqa: E402
from geometry.errors import BadInput  # noqa: E402
from geometry.image_contract import GATE_REASON_PREFIX  # noqa: E402
from geometry.kv.drafter_backend import DrafterBackendNotModelled  # noqa: E402
from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.oracle.plan import (  # noqa: E402
    compare_reports,
    drafter_backend_names,  # noqa: E402
    plan_with_vllm,
)
from geometry.plan.simulate import simulate  # noqa: E402
from geometry.verdict.gate import check  # noqa: E402

N = int(os.environ.get("GEOMETRY_ORACLE_N", "300"))
SEED = int(os.environ.get("GEOMETRY_ORACLE_SEED", "20261130"))
BEHAVIOUR = os.environ.get("GEOMETRY_ORACLE_BEHAVIOUR", "stock")
# The seeded sample, each draw a case whatever the simulator makes of it (test_sampled_draw_agrees_with_vllm):
# planned by both, refused by both for the same reason, or refused by the simulator for a reason vLLM's code
# confirms. CASES and REFUSED split it by the simulator's outcome for the sample's own checks only.
DRAWS = C.draws(C.sample(N, SEED), BEHAVIOUR)
CASES, REFUSED = C.simulator_decides(C.sample(N, SEED), BEHAVIOUR)
ALIGN_CASES = C.align_matrix(BEHAVIOUR)
GB10_CASES = C.gb10_matrix(BEHAVIOUR)
DENSE_CASES = C.dense_matrix(BEHAVIOUR)
QWEN3_MOE_CASES = C.qwen3_moe_matrix(BEHAVIOUR)


def _agree(data: dict) -> tuple:
    """(simulator, vLLM, differences) for a case the simulator plans (a refusal here fails), the drafter's
    backend included: the simulator's model of vLLM's choice against the one vLLM's own selector made, where
    the drafter loaded on both sides. A plan both refuse agrees only when both refuse it for the same reason
    (refusal_reasons.py maps vLLM's message and the simulator's to what each refuses for)."""
    inputs = GeometryInputs.from_json(dict(data, vllm_behaviour=BEHAVIOUR))
    try:
        sim = simulate(inputs)
    except BadInput as exc:
        pytest.fail(f"the simulator refuses a case given as planned: {exc}")
    vllm = plan_with_vllm(inputs)
    diffs = compare_reports(sim, vllm)
    for label in ("with_drafter", "without_drafter", "target_only_same_spec"):
        sim_error, vllm_error = getattr(sim, label).error, getattr(vllm, label).error
        if sim_error and vllm_error:
            diffs += tuple(R.differences(label, sim_error, vllm_error))
    if not sim.with_drafter.error and not vllm.with_drafter.error and sim.drafter_backend != vllm.drafter_backend:
        diffs += (f"drafter_backend: simulator={sim.drafter_backend!r} vllm={vllm.drafter_backend!r}",)
    return sim, vllm, diffs


def _refusal_agrees(data: dict, refused: BadInput, tmp_path, capsys) -> None:
    """The simulator refuses ``data``: the in-image gate exits with its bad-input code and the simulator's
    reason as its one line, and vLLM's own code confirms the reason (the only one mapped: the automatic
    drafter backend the simulator does not model is the backend vLLM's selector, ``CudaPlatform`` on the
    family's capability, picks for every drafter layer)."""
    import json

    gate_input = tmp_path / "gate-input.json"
    gate_input.write_text(json.dumps(data))
    assert gate_main.main(["--input", str(gate_input), "--behaviour", "input"]) == gate_main.EXIT_BAD_INPUT
    assert capsys.readouterr().err.splitlines()[-1] == f"{GATE_REASON_PREFIX}bad input: {refused}"
    assert isinstance(refused, DrafterBackendNotModelled), f"no vLLM outcome is mapped to this refusal: {refused}"
    chosen = drafter_backend_names(GeometryInputs.from_json(data))
    assert chosen and set(chosen.values()) == {refused.backend}, chosen


@pytest.mark.parametrize("case_id", list(DRAWS))
def test_sampled_draw_agrees_with_vllm(case_id, tmp_path, capsys):
    """Each draw of the sample, whatever the outcome: planned by the simulator, it is compared with vLLM's plan
    field by field (refusals by their reasons); refused by the simulator, the refusal is the gate's and vLLM's
    code confirms what it is for, and the draw is compared again with the drafter's backend pinned, whatever
    that outcome."""
    data = DRAWS[case_id]
    for pinned in (False, True):
        try:
            simulate(GeometryInputs.from_json(data))
        except BadInput as refused:
            _refusal_agrees(data, refused, tmp_path, capsys)
            automatic = data["drafter_config"] is not None and data.get("drafter_attention_backend") in (None, "auto")
            if pinned or not automatic:
                return
            data = C.pinned_companion(data)
            continue
        sim, vllm, diffs = _agree(data)
        assert not diffs, "\n".join(diffs[:20])
        if pinned and not vllm.with_drafter.error:
            assert vllm.drafter_backend == C.PINNED_DRAFTER_BACKEND, vllm.drafter_backend
        return


def test_the_sample_has_refusals_and_plans():
    """Both outcomes of the simulator are in the sample (a sample of every draw refused, or none, would
    leave one of the two checks of test_sampled_draw_agrees_with_vllm unexercised), and the refusals leave
    most of the sample's geometry compared with vLLM's: each draw refused for the drafter's automatic backend
    has a compared companion with the backend pinned, and at least 90% of the draws (as drawn or pinned) are
    compared."""
    assert CASES
    assert REFUSED or N < 100  # a small GEOMETRY_ORACLE_N may draw none
    drawn = {case_id.split("-")[0] for case_id in CASES}
    backend_refused = [
        case_id
        for case_id, data in REFUSED.items()
        if case_id.endswith("-refused") and isinstance(_refusal(data), DrafterBackendNotModelled)
    ]
    uncompared = [c for c in backend_refused if f"{c.split('-')[0]}-pinned-{C.PINNED_DRAFTER_BACKEND}" not in CASES]
    assert not uncompared, uncompared
    summary = (
        f"{len(drawn)} of {N} draws compared with vLLM ({len(CASES)} cases, "
        f"{sum('-pinned-' in c for c in CASES)} with the drafter's backend pinned); {len(REFUSED)} refusal cases"
    )
    print(summary)
    assert len(drawn) >= 0.9 * N, summary


def test_the_split_sample_is_the_draws_and_deterministic():
    """Splitting the sample again gives the same case ids and inputs; each draw is kept as drawn
    (``s{i}`` or ``s{i}-refused``), and a pinned companion differs from its draw only in the
    drafter's attention backend."""
    draws = C.sample(N, SEED)
    assert C.simulator_decides(draws, BEHAVIOUR) == (CASES, REFUSED)
    assert not CASES.keys() & REFUSED.keys()
    for case_id, data in itertools.chain(CASES.items(), REFUSED.items()):
        draw, _, kind = case_id.partition("-")
        drawn = dict(draws[int(draw[1:])], vllm_behaviour=BEHAVIOUR)
        if kind == f"pinned-{C.PINNED_DRAFTER_BACKEND}":
            assert drawn.get("drafter_attention_backend") is None
            assert data == dict(drawn, drafter_attention_backend=C.PINNED_DRAFTER_BACKEND), case_id
        else:
            assert kind in ("", "refused"), case_id
            assert data == drawn, case_id
    assert {c.split("-")[0] for c in itertools.chain(CASES, REFUSED)} == {f"s{i:0{len(str(N - 1))}d}" for i in range(N)}


def _refusal(data: dict) -> BadInput:
    with pytest.raises(BadInput) as refused:
        simulate(GeometryInputs.from_json(data))
    return refused.value


def test_the_draws_are_the_sample_whatever_the_simulator_makes_of_them():
    """The parametrized draws are the seeded sample, every one of them, chosen before any simulator ran."""
    draws = C.sample(N, SEED)
    assert list(DRAWS.values()) == [dict(d, vllm_behaviour=BEHAVIOUR) for d in draws]
    assert set(DRAWS) == {c.split("-")[0] for c in itertools.chain(CASES, REFUSED)}


def test_a_refusal_for_another_reason_than_vllms_is_a_difference():
    """refusal_reasons.py tells refusals apart by what they refuse: another layer, another field or an unread
    message is a difference, where the exception types alone would agree."""
    page = (
        "NotImplementedError: Layer model.layers.{}.self_attn: page size is not divisible by the maximum page "
        "size and cannot be padded. Padding is only supported for non-MLA attention layers."
    )
    assert R.differences("with_drafter", page.format(3), page.format(3)) == []
    assert R.differences("with_drafter", page.format(3), page.format(2))
    selected = "ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this configuration. "
    dtype, block = "Reason: ['kv_cache_dtype not supported']", "Reason: ['block_size not supported']"
    noted = "Reason: ['kv_cache_dtype not supported', 'FP8 KV cache requires FA3']"
    assert R.differences("p", selected + dtype, selected + noted) == []
    assert R.differences("p", selected + block, selected + dtype)
    assert R.differences("p", "ValueError: something else", "ValueError: something else")
    assert R.differences(
        "p", "AssertionError: drafter KV heads not divisible by TP", "AssertionError: assert heads % tp == 0"
    )


@pytest.mark.parametrize("idx", range(len(ALIGN_CASES)))
def test_align_matrix_agrees_with_vllm(idx):
    """Prefix caching on ("align"): TP x num_spec x index_kpool x drafter KV
    dtype and heads, with and without the drafter."""
    sim, vllm, diffs = _agree(ALIGN_CASES[idx])
    assert not diffs, "\n".join(diffs[:20])
    assert vllm.with_drafter.prefix_cache is not None or vllm.with_drafter.error


@pytest.mark.parametrize("idx", range(len(GB10_CASES)))
def test_gb10_matrix_agrees_with_vllm(idx):
    """GB10 (family 120): TP 2/4 x target KV x prefix caching x drafter KV."""
    data = GB10_CASES[idx]
    sim, vllm, diffs = _agree(data)
    assert not diffs, "\n".join(diffs[:20])
    alone = vllm.target_only_same_spec
    assert not alone.error  # auto and fp8 both run as fp8_ds_mla
    assert {r.bytes_per_token for r in alone.layers if r.role == "mla_latent"} == {656}
    d_kv = data["drafter_kv_cache_dtype"]
    if data["drafter_config"] is not None and d_kv not in ("auto", "bfloat16"):
        # inherited fp8_ds_mla, or fp8: FLASH_ATTN (FA2 on SM12x) takes neither
        assert vllm.with_drafter.error.startswith("ValueError")
    else:
        assert not vllm.with_drafter.error


@pytest.mark.parametrize("idx", range(len(DENSE_CASES)))
def test_dense_matrix_agrees_with_vllm(idx):
    """A dense Qwen3 target (no mamba state, no drafter) on each GPU family and on vLLM's CPU
    platform: family x TP x KV heads x head size x block size x prefix caching."""
    data = DENSE_CASES[idx]
    sim, vllm, diffs = _agree(data)
    assert not diffs, "\n".join(diffs[:20])
    plan = vllm.with_drafter
    assert not plan.error and plan.prefix_cache.hit_alignment_tokens == plan.block_size
    assert check(vllm).passed


# (target head size, target KV cache dtype): FLASH_ATTN's kernel blocks follow the model config's (the
# SM90 FP8 head-512 page, the SM10x head-256 FA4 page), so the targets span them.
_SELECTION_TARGETS = ((128, "auto"), (256, "auto"), (512, "fp8"))


@pytest.mark.parametrize("family", [90, 100, 120])
def test_the_drafters_automatic_backend_is_the_one_vllms_selector_picks(family):
    """geometry/kv/drafter_backend.py's model of vLLM's automatic choice against vLLM's own
    ``get_attn_backend`` (``CudaPlatform``'s selector on the family's capability), for drafter head
    sizes, KV cache dtypes, causality and user block sizes beyond the sampled matrix's; and, with the
    drafter's backend pinned to FLASH_ATTN (the attention config's ``backend``), whether vLLM's
    selector takes it or raises its ValueError (``selected_backend_error``)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.config.utils import replace
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import get_attn_backend

    from geometry.kv.drafter_backend import DrafterAsk, select, selected_backend_error
    from geometry.kv.kv_spec import SimulatedError
    from geometry.oracle.backend_selection import clear_selection_cache
    from geometry.oracle.serving_platform import serving_platform
    from geometry.oracle.vllm_config import build_vllm_config

    checked, pinned_checked = set(), set()

    def vllm_selects(cfg, head, kv, **attention) -> str:
        target_attention = cfg.attention_config
        cfg.attention_config = replace(target_attention, **attention)
        try:
            with set_current_vllm_config(cfg):
                return get_attn_backend(head, torch.bfloat16, kv, has_sliding_window=True).get_name()
        except ValueError:
            return "ValueError"
        finally:
            cfg.attention_config = target_attention

    with serving_platform(family):
        for (target_head, target_kv), block in itertools.product(_SELECTION_TARGETS, (None, 16, 64)):
            data = dict(
                C.dense_matrix(BEHAVIOUR)[0],
                target_config=C.qwen3_dense_target(head_dim=target_head),
                capability_family=family,
                kv_cache_dtype=target_kv,
                block_size=block,
            )
            cfg, _ = build_vllm_config(GeometryInputs.from_json(data), False, 0)
            assert cfg.model_config.get_head_size() == target_head
            clear_selection_cache()  # vLLM's cache of selections is for one model config per process
            for head, kv, non_causal in itertools.product(
                (20, 64, 96, 128, 256, 512),
                ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"),
                (False, True),
            ):
                ask = DrafterAsk(family, head, kv, "bfloat16", non_causal, block, target_head, target_kv)
                try:
                    expected = select(ask)
                except SimulatedError as exc:
                    expected = exc.vllm_type
                got = vllm_selects(cfg, head, kv, use_non_causal=non_causal)
                assert got == expected, ask
                checked.add(got)
                pinned = "FLASH_ATTN" if selected_backend_error("FLASH_ATTN", ask) is None else "ValueError"
                got = vllm_selects(cfg, head, kv, use_non_causal=non_causal, backend=AttentionBackendEnum.FLASH_ATTN)
                assert got == pinned, ("pinned FLASH_ATTN", ask)
                pinned_checked.add(got)
    assert {"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "ValueError"} <= checked
    assert pinned_checked == {"FLASH_ATTN", "ValueError"}


def test_dense_cpu_by_hand():
    """vLLM's CPU platform for a dense Qwen3 without a block size, by hand: CpuPlatform asks its
    backend from 128 tokens and CPU_ATTN takes any multiple of 32, so the block is 128; a block of
    one layer holds K and V of 2 KV heads x head 64 in bf16 for 128 tokens; 4 layers share a block."""
    data = dict(C.dense_matrix(BEHAVIOUR)[0], block_size=None, kv_cache_memory_bytes=1 << 30)
    assert data["capability_family"] == 0 and data["tensor_parallel_size"] == 1
    sim, vllm, diffs = _agree(data)
    assert not diffs, "\n".join(diffs[:20])
    per_block = 4 * 2 * 2 * 64 * 2 * 128
    assert vllm.with_drafter.block_size == 128
    assert vllm.with_drafter.bytes_per_block == per_block
    assert vllm.with_drafter.num_blocks == (1 << 30) // per_block
    assert vllm.with_drafter.prefix_cache.hit_alignment_tokens == 128


def _qwen3_moe_id(data: dict) -> str:
    return (
        f"f{data['capability_family']}-tp{data['tensor_parallel_size']}"
        f"-kv{data['target_config']['num_key_value_heads']}"
        f"-{'dflash' if data['drafter_config'] else 'nodrafter'}"
        f"-{'prefix' if data['enable_prefix_caching'] else 'noprefix'}"
    )


@pytest.mark.parametrize("data", QWEN3_MOE_CASES, ids=[_qwen3_moe_id(d) for d in QWEN3_MOE_CASES])
def test_qwen3_moe_matrix_agrees_with_vllm(data):
    """A Qwen3-MoE target, planned by the simulator and by vLLM (Qwen3MoeConfig, vLLM's Attention
    layers): family 100 with and without the DFlash drafter and vLLM's CPU platform, TP 1/2. Each
    input is modelled (no skip), and vLLM plans a cache holding every layer."""
    inputs = GeometryInputs.from_json(dict(data, vllm_behaviour=BEHAVIOUR))
    sim = simulate(inputs)
    vllm = plan_with_vllm(inputs)
    diffs = compare_reports(sim, vllm)
    assert not diffs, "\n".join(diffs[:20])
    assert sim.model_kind == "qwen3_moe"
    assert sim.backends[0] == ("CPU_ATTN" if data["capability_family"] == 0 else "FLASH_ATTN")
    n_target = data["target_config"]["num_hidden_layers"]
    n_drafter = data["drafter_config"]["num_hidden_layers"] if data["drafter_config"] else 0
    kv_per_rank = max(1, data["target_config"]["num_key_value_heads"] // data["tensor_parallel_size"])
    for plan, n_layers in ((vllm.with_drafter, n_target + n_drafter), (vllm.without_drafter, n_target)):
        assert not plan.error and plan.num_blocks > 0 and plan.bytes_per_block > 0
        assert len(plan.layers) == n_layers
        target = [r for r in plan.layers if r.owner == "target"]
        assert [r.name for r in target] == [f"model.layers.{i}.self_attn.attn" for i in range(n_target)]
        assert {(r.role, r.num_kv_heads, r.head_size) for r in target} == {("attention", kv_per_rank, 128)}
    if data["drafter_config"] is None:  # with one, the gate weighs the drafter's cost (not asserted here)
        assert check(vllm).passed


RECIPES = sorted((REPO / "recipes").glob("*/recipe.yaml"))


@pytest.mark.parametrize("path", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_recipe_gate_input_agrees_with_vllm(path):
    """Every recipe's own gate input, as the build writes it."""
    from stackbuild.core.gate import gate_input
    from stackbuild.core.recipe import load_recipe

    sim, vllm, diffs = _agree(gate_input(load_recipe(path), vllm_behaviour=BEHAVIOUR).to_json())
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
    sim, vllm, diffs = _agree(
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
    mla_page = block * 656  # fp8_ds_mla: 512 NoPE + 16 scales + 128 RoPE bytes per token
    indexer_page = block // 4 * (128 + 4)  # one fp8 key + 4 scale bytes per kpool-4 state
    # block stride: the lcm of the MLA rows (64 x 656) and the indexer's
    # MultipleOf(256) (its page at 256 tokens: 64 states x 132)
    stride = math.lcm(64 * 656, 64 * 132)
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
        assert plan.target_attention_page == mla_page == 3_022_848
        assert plan.mamba_page_size_padded == block * 512
        assert plan.bytes_per_block == stride * -(-widest // stride)
    assert vllm.target_only_same_spec.bytes_per_block == 36_022_272
    assert vllm.with_drafter.bytes_per_block == 48_491_520
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
    sim, vllm, diffs = _agree(C.recipe_input(BEHAVIOUR, **C.prefix_caching(prefix_caching)))
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
    sim, vllm, diffs = _agree(C.recipe_input(BEHAVIOUR))
    assert not diffs, "\n".join(diffs[:20])
    if BEHAVIOUR == "stock":
        # pristine vLLM: the drafter's group is the widest and costs blocks
        v = check(vllm)
        assert not v.passed
        assert vllm.with_drafter.bytes_per_block > vllm.target_only_same_spec.bytes_per_block


def test_post_scenario_agrees():
    sim, vllm, diffs = _agree(C.post_scenario(BEHAVIOUR))
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
        sim, vllm, diffs = _agree(data)
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
    _, _, diffs = _agree(data)
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
_PLAN_IN_A_FRESH_INTERPRETER = """import json, sys
import geometry
from geometry.oracle import record
from geometry.model.inputs import GeometryInputs
from geometry.oracle.plan import blocks_per_request, plan_with_vllm
from vllm.platforms import current_platform

out = {"geometry": geometry.__file__, "platform": type(current_platform).__name__, "plans": []}
for data in json.load(sys.stdin):
    inputs = GeometryInputs.from_json(data)
    try:
        per_request = blocks_per_request(inputs)
    except Exception as exc:
        per_request = f"{type(exc).__name__}: {exc}"
    out["plans"].append({"report": record.comparable(plan_with_vllm(inputs)),
                         "blocks_per_request": per_request})
print("PLANS " + json.dumps(out, default=str))
"""


def _plan_in_a_fresh_interpreter(cases: list, target_device) -> dict:
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "VLLM_TARGET_DEVICE"}
    if target_device is not None:
        env["VLLM_TARGET_DEVICE"] = target_device
    run = subprocess.run(
        [sys.executable, "-c", _PLAN_IN_A_FRESH_INTERPRETER],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=1800,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("PLANS "))[len("PLANS ") :])
    assert out["geometry"].startswith(str(REPO / "geometry")), out["geometry"]
    return out


def _first_with_a_sliding_window_drafter(model_type: str) -> dict:
    return next(
        c
        for c in CASES.values()
        if c["target_config"]["model_type"] == model_type
        and c["drafter_config"] is not None
        and "sliding_attention" in c["drafter_config"].get("layer_types", ())
    )


def test_the_answer_does_not_depend_on_vllms_platform():
    """The same inputs planned under vLLM's CPU platform (VLLM_TARGET_DEVICE=cpu, what the
    pre-flight sets) and under the platform vLLM detects without it (none on a CPU-only host,
    as in the image's build) give the same reports and blocks per request. The CPU platform's
    config hook resets the GDN state to float32 (on AVX512-BF16 CPUs) and turns async
    scheduling off: the oracle must answer for the GPU the image serves on either way."""
    cases = [
        dict(_first_with_a_sliding_window_drafter(kind), vllm_behaviour=BEHAVIOUR)
        for kind in ("glm5_next_text", "kimi_linear", "qwen3_next")
    ]
    on_cpu = _plan_in_a_fresh_interpreter(cases, "cpu")
    detected = _plan_in_a_fresh_interpreter(cases, None)
    assert on_cpu["platform"] == "CpuPlatform"
    assert detected["platform"] != "CpuPlatform", "this vLLM is a CPU build: no second platform here"
    for data, cpu_plan, detected_plan in zip(cases, on_cpu["plans"], detected["plans"]):
        kind = data["target_config"]["model_type"]
        assert cpu_plan["report"] == detected_plan["report"], kind
        assert cpu_plan["blocks_per_request"] == detected_plan["blocks_per_request"], kind
        # The drafter's sliding-window group, by hand (SlidingWindowSpec.max_admission_blocks_per_request):
        # window - 1 tokens plus the tokens in flight, two batches of vLLM's default 2,048 batched
        # tokens (async scheduling, on by default on a GPU), never more than the model length; plus
        # one block for a window that does not start on a block boundary.
        spec_class, block, blocks = cpu_plan["blocks_per_request"][-1]
        assert spec_class == "SlidingWindowSpec", kind
        window = data["drafter_config"]["sliding_window"]
        max_len = data.get("max_model_len") or data["target_config"]["max_position_embeddings"]
        assert blocks == -(-min(window - 1 + 2 * 2048, max_len) // block) + 1, kind


def test_a_target_config_transformers_refuses_is_a_plan_error_naming_the_class():
    """vLLM loads the target's config with transformers' class; one it refuses (a string
    rms_norm_eps: the simulator reads no such field) is no plan, with the class and the field named."""
    data = dict(_first_with_a_sliding_window_drafter("qwen3_next"), vllm_behaviour=BEHAVIOUR)
    data["target_config"] = dict(data["target_config"], rms_norm_eps="x")
    report = plan_with_vllm(GeometryInputs.from_json(data))
    for plan in (report.with_drafter, report.without_drafter, report.target_only_same_spec):
        assert plan.error.startswith("ValueError: Qwen3NextConfig refuses the target config: "), plan.error
        assert "'rms_norm_eps'" in plan.error and "\n" not in plan.error


def test_engine_core_refuses_a_key_it_does_not_have():
    """A misspelt key would leave its default planned: the CLI exits 2 naming it, before
    planning anything (no vLLM import needed for that)."""
    import json
    import subprocess

    from support.engine_core import BadEngineCoreCase, engine_core_plan

    run = subprocess.run(
        [sys.executable, "-m", "support.engine_core_cli", "--engine-core", json.dumps([{"tp": 2}, {"tp_size": 2}])],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")])),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stdout == ""
    assert run.stderr.splitlines()[0].startswith("usage: python -m support.engine_core_cli")
    assert run.stderr.splitlines()[-1].startswith(
        "python -m support.engine_core_cli: error: --engine-core case 1: unknown key 'tp_size' (keys: "
    )
    with pytest.raises(BadEngineCoreCase, match=r"^unknown key 'num_specs' \(keys: "):
        engine_core_plan({"num_specs": 3})


# Architecture lists on which the two target classifiers the simulator once had disagreed
# (model_kind took any listed name starting "Glm5Next" or naming a modelled class, the other the
# first, exactly), plus the plain ones. vLLM decides: it tries the listed architectures in order
# and runs the first its registry has (ModelRegistry.inspect_model_cls).
ARCHITECTURE_LISTS = [
    ["Glm5NextForCausalLM"],
    ["Qwen3NextForCausalLM"],
    ["KimiLinearForCausalLM"],
    ["LlamaForCausalLM", "Qwen3NextForCausalLM"],  # vLLM runs Llama; model_kind said qwen3_next
    ["Glm5NextMTPModel"],  # vLLM's GLM MTP drafter, no target; model_kind said glm5next
    ["Glm5NextForConditionalGeneration"],  # the multimodal model; model_kind said glm5next
    ["NotARegisteredModel", "Qwen3NextForCausalLM"],  # vLLM runs Qwen3-Next: refused, not misread
]


@pytest.mark.parametrize("architectures", ARCHITECTURE_LISTS, ids=["+".join(a) for a in ARCHITECTURE_LISTS])
def test_the_target_kind_is_the_model_vllm_runs_or_a_refusal(architectures):
    """read_target never names a kind other than that of the model vLLM runs; a config listing
    exactly one modelled architecture is that kind. What vLLM would run but the gate cannot tell
    from the config alone (a first architecture it does not know) is refused, never guessed."""
    from vllm.model_executor.models.registry import ModelRegistry

    from geometry.model.architectures import BY_HF_ARCHITECTURE
    from geometry.model.config import ConfigInvalid, read_target

    supported = ModelRegistry.get_supported_archs()
    runs = next((a for a in architectures if a in supported), None)
    assert runs is not None, architectures
    config = {"architectures": architectures, "model_type": "qwen3_next"}
    try:
        kind = read_target(config).kind
    except ConfigInvalid as exc:
        assert exc.key == "architectures"
        assert architectures[0] not in BY_HF_ARCHITECTURE
        return
    assert kind == BY_HF_ARCHITECTURE[runs].kind
    assert runs == architectures[0]
