"""The simulator's numbers from outside the code under test: the post's build-time check (MLA page
4,390,912 B, drafter block 4288 for a 4-KV-head fp8 drafter at num_spec 0) and arithmetic on the
configs' own fields, per architecture and GPU family (standard library only). Agreement with vLLM
itself is tested in tests/agreement/test_plan_agreement.py; the default recipe's figures
(tests/default_recipe_figures.py, from which the documents' tables are generated) against vLLM's
planner in tests/agreement/test_overlay_planning_agreement.py.
"""

from __future__ import annotations

import json
import math
import random

import default_recipe_figures as F  # noqa: E402
import geometry_cases as C  # noqa: E402
import pytest
from default_recipe_figures import Column  # noqa: E402
from support.simulate_cases import default_recipe_fields, kimi_input

from geometry.errors import BadInput  # noqa: E402
from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.plan.simulate import simulate  # noqa: E402
from geometry.verdict.gate import check  # noqa: E402
from geometry.verdict.table import render_text, to_json  # noqa: E402
from stackbuild.core.gate import gate_input  # noqa: E402
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe  # noqa: E402

GATE_MODULE = "geometry.gate_main"
COMPAT_SCRIPT = "sim_glm5_drafter_hades.py"  # the gate's name in the published images


def _inputs(data: dict) -> GeometryInputs:
    return GeometryInputs.from_json(data)


def test_post_scenario_numbers():
    """4 KV heads, fp8 drafter, num_spec 0 (the post's hard-coded check)."""
    report = simulate(_inputs(C.post_scenario("overlay")))
    plan = report.with_drafter
    assert plan.target_attention_page == 4_390_912
    drafter = [r for r in plan.layers if r.owner == "drafter"]
    assert {r.block_size for r in drafter} == {4288}
    assert {r.real_page_bytes for r in drafter} == {4_390_912}
    assert check(report).passed
    # stock 0.34.0 gives the drafter the target's block instead
    stock = simulate(_inputs(C.post_scenario("stock")))
    assert {r.block_size for r in stock.layers if r.owner == "drafter"} == {stock.with_drafter.block_size}
    v = check(stock)
    assert not v.passed and v.suggested_drafter_block == 4288 and v.suggested_is_kernel_multiple


def test_recipe_stock_fails_overlay_passes():
    t, d = C.recipe_configs()
    stock = simulate(_inputs(C.recipe_input("stock")))
    overlay = simulate(_inputs(C.recipe_input("overlay")))
    vs, vo = check(stock), check(overlay)
    assert not vs.passed and vo.passed
    # the drafter's bytes per token follow from its config: 2 (K,V) x heads x head_dim x bf16
    bpt = 2 * d["num_key_value_heads"] * d["head_dim"] * 2
    assert vs.drafter_bytes_per_token == bpt
    # P is the MLA latent page: one latent of kv_lora_rank fp8 bytes per token
    assert vs.target_attention_page == stock.with_drafter.block_size * t["kv_lora_rank"]
    assert vs.suggested_drafter_block * bpt == vs.target_attention_page
    assert vs.bytes_per_block_with > vs.bytes_per_block_without
    assert vo.bytes_per_block_with == vo.bytes_per_block_without
    assert vo.num_blocks_with == vo.num_blocks_without
    # one MLA group (latent + indexer) of the aligned block: capacity = blocks x block
    block = stock.with_drafter.block_size
    assert vs.kv_tokens_with == vs.num_blocks_with * block < vs.kv_tokens_without
    assert vo.kv_tokens_with == vo.kv_tokens_without == vo.num_blocks_with * block
    assert any(r.startswith("KV capacity") for r in vs.reasons)
    assert any("would fit exactly" in r for r in vs.reasons)
    assert (vs.passed, vo.passed, vo.reasons) == (False, True, ())
    text = render_text(stock, vs)
    assert "FAIL" in text and "exact-fit drafter block" in text
    json.dumps(to_json(overlay, vo), default=str)


def test_default_recipe_figures_from_config_arithmetic():
    """The default recipe's figures (stock vLLM 0.34.0 / with the overlay), each dataclass compared
    whole with vLLM 0.34.0's formulas worked out here on the config snapshots' fields, then the
    simulator's report for the recipe's own gate input against every figure: the documents' tables
    are that report, rendered."""
    fields = default_recipe_fields()
    t, d, raw = fields["t"], fields["d"], fields["raw"]
    # the recipe the figures describe: GB300 (family 100), TP1, fp8 target KV,
    # drafter KV auto (bf16 for a non-MTP drafter), num_spec 7, 150 GiB
    assert (
        raw["capability_family"],
        raw["tensor_parallel_size"],
        raw["kv_cache_dtype"],
        raw["drafter_kv_cache_dtype"],
        raw["num_speculative_tokens"],
    ) == (100, 1, "fp8", "auto", 7)
    tp, num_spec, memory = raw["tensor_parallel_size"], raw["num_speculative_tokens"], raw["kv_cache_memory_bytes"]
    assert memory == F.MEMORY_GIB * C.GIB  # geometry.kv_cache_memory_gib
    # KDA state (mamba_utils.kda_state_shape / kda_state_dtype): conv state
    # (H*D + 2*H*D)/tp x (k - 1 + num_spec) in bf16, recurrent H/tp x D x D in fp32
    heads, dim, kernel = t["linear_num_heads"], t["linear_head_dim"], t["linear_conv_kernel_dim"]
    kda = 3 * heads * dim // tp * (kernel - 1 + num_spec) * 2 + heads // tp * dim * dim * 4
    assert kda == 24_576 * 10 * 2 + 64 * 128 * 128 * 4 == 4_685_824
    # MLA latent in fp8: kv_lora_rank + qk_rope_head_dim bytes per token
    mla_per_token = t["kv_lora_rank"] + t["qk_rope_head_dim"]
    # hybrid alignment: the sparse indexer's kernel block 32 x index_kpool, at least 128
    align = max(128, 32 * t["index_kpool"])
    block = align * -(-kda // (align * mla_per_token))
    assert block == 128 * 72 == 9_216
    page = block * mla_per_token
    # the drafter: K and V, its KV heads per rank x head_dim, bf16
    drafter_per_token = 2 * d["num_key_value_heads"] // tp * d["head_dim"] * 2
    exact_fit = page // drafter_per_token
    assert exact_fit * drafter_per_token == page and exact_fit % 16 == 0  # FLASH_ATTN's kernel block

    # bytes per block (kv_cache_planning._get_kv_cache_bytes_per_block, block-outermost
    # layout): the widest group's pages, rounded up to the lcm of the layers' block
    # stride alignments: the sparse MLA backend's rows (FlashInfer sparse MLA on family
    # 100: MultipleOf(32) rows of the latent, align_blocks_to_rows) and the indexer's
    # paged-MQA pages (64 states of 128 fp8 + 4 scale bytes)
    key_bytes = t["index_head_dim"] + 4
    stride = math.lcm(32 * mla_per_token, 64 * key_bytes)
    assert stride == 540_672
    mla_layers = t["layer_types"].count("indexed_attention")
    kda_layers = t["layer_types"].count("linear_attention")
    assert (mla_layers, kda_layers) == (11, 34)
    # one group holds the 11 MLA layers' latent and indexer pages (an indexer
    # state per index_kpool tokens); the packed planner puts at most (that group's bytes //
    # KDA page) KDA pages in a group
    mla_group = mla_layers * (page + block // t["index_kpool"] * key_bytes)
    kda_groups = -(-kda_layers // (mla_group // page))
    assert F.KDA_GROUPS == kda_groups == 4
    assert -(-kda_layers // kda_groups) * page < mla_group
    # stock: the drafter's 5 layers of 8x the MLA page are wider than any target
    # group (wider even than all 34 KDA pages together)
    stock_drafter_group = d["num_hidden_layers"] * block * drafter_per_token
    assert stock_drafter_group > max(mla_group, kda_layers * page)
    overlay_drafter_group = d["num_hidden_layers"] * page
    assert overlay_drafter_group < mla_group
    without = stride * -(-mla_group // stride)
    stock_with = stride * -(-stock_drafter_group // stride)
    assert (without, stock_with) == (103 * stride, 350 * stride)

    assert F.DRAFTER_BYTES_PER_TOKEN == drafter_per_token == 4_096
    for column, (drafter_block, with_bytes) in (
        (F.STOCK, (block, stock_with)),  # stock 0.34.0 gives the drafter the target's block
        (F.OVERLAY, (exact_fit, without)),  # the overlay the exact fit
    ):
        assert column == Column(
            target_block=block,
            mla_page=page,
            kda_real_page=kda,
            kda_padded_page=page,
            drafter_block=drafter_block,
            drafter_page=drafter_block * drafter_per_token,
            bytes_per_block_with=with_bytes,
            bytes_per_block_without=without,
            blocks=memory // with_bytes,
            kv_token_slots=memory // with_bytes * block,
            passed=with_bytes == without,  # the drafter costs the target no capacity
        )

    for behaviour, column in (("stock", F.STOCK), ("overlay", F.OVERLAY)):
        report = simulate(gate_input(load_recipe(DEFAULT_RECIPE), vllm_behaviour=behaviour))
        plan, alone = report.with_drafter, report.target_only_same_spec
        rows = {
            (r.role, r.block_size, r.real_page_bytes, r.page_bytes)
            for r in plan.layers
            if r.role in ("kda", "mla_latent", "sliding_window")
        }
        assert rows == {
            ("kda", column.target_block, column.kda_real_page, column.kda_padded_page),
            ("mla_latent", column.target_block, column.mla_page, column.mla_page),
            ("sliding_window", column.drafter_block, column.drafter_page, column.drafter_page),
        }, behaviour
        assert {r.bytes_per_token for r in plan.layers if r.owner == "drafter"} == {F.DRAFTER_BYTES_PER_TOKEN}
        assert (plan.block_size, plan.bytes_per_block, plan.num_blocks, plan.tokens_fit) == (
            column.target_block,
            column.bytes_per_block_with,
            column.blocks,
            column.kv_token_slots,
        )
        assert alone.bytes_per_block == column.bytes_per_block_without
        assert check(report).passed is column.passed
        assert report.kv_cache_memory_bytes == F.MEMORY_GIB * C.GIB
    overlay = simulate(gate_input(load_recipe(DEFAULT_RECIPE))).with_drafter
    assert len([g for g in overlay.groups if g.spec_class == "MambaSpec"]) == F.KDA_GROUPS


def test_overlay_without_exact_fit_keeps_stock():
    _, d = C.recipe_configs()
    # 5 KV heads x 128 x bf16 x (K+V) = 2560 B/token = 2^9 x 5; P = block x 512 with
    # the block a multiple of 128 and not of 5 here, so no exact fit
    odd = dict(d, num_key_value_heads=5, num_attention_heads=40, head_dim=128)
    report = simulate(_inputs(C.recipe_input("overlay", drafter_config=odd)))
    assert report.notes and "stock behaviour kept" in report.notes[0]
    v = check(report)
    assert not v.passed and v.suggested_drafter_block is None
    assert any("no drafter block fits exactly" in r for r in v.reasons)


def test_auto_kv_rule_only_on_family_100():
    """vLLM 0.34.0's Glm5NextModelConfig.verify_and_update_config: only a
    target KV dtype "auto" on capability family 100 becomes fp8, and then a
    non-MTP drafter without its own dtype gets "auto" (bf16). Otherwise
    nothing changes and the drafter runs the target's dtype."""
    r100 = simulate(_inputs(C.recipe_input("stock")))
    assert (r100.target_kv_dtype, r100.drafter_kv_dtype) == ("fp8", "auto")
    r90 = simulate(_inputs(C.recipe_input("stock", capability_family=90)))
    assert (r90.target_kv_dtype, r90.drafter_kv_dtype) == ("auto", "auto")
    explicit = simulate(_inputs(C.recipe_input("stock", kv_cache_dtype="fp8")))
    assert (explicit.target_kv_dtype, explicit.drafter_kv_dtype) == ("fp8", "fp8")


@pytest.mark.parametrize("requested", ["auto", "fp8", "fp8_e4m3"])
def test_family_120_runs_fp8_ds_mla(requested):
    """Family 120: _canonicalize_sparse_mla_kv_cache_dtype (mla_attention.py)
    makes FLASHINFER_MLA_SPARSE_SM120 run auto/fp8/fp8_e4m3 as fp8_ds_mla and
    MLAAttention writes that back to the cache config; a drafter without its
    own dtype loads after the target and inherits it, which FLASH_ATTN's
    supported_kv_cache_dtypes (auto, float16, bfloat16, fp8, fp8_e4m3) refuse."""
    inherit = simulate(_inputs(C.recipe_input("stock", capability_family=120, kv_cache_dtype=requested)))
    assert (inherit.target_kv_dtype, inherit.drafter_kv_dtype) == ("fp8_ds_mla", "fp8_ds_mla")
    assert inherit.with_drafter.error.startswith("ValueError")
    assert not inherit.target_only_same_spec.error  # the target alone still plans
    # the packed layout: 512 B NoPE + 16 B scales + 128 B RoPE per token (0.33.0); 0.34.0 asks the
    # SM120 implementation, whose row for GLM-5.3's 512-wide latent without RoPE drops the RoPE part
    for version, row in (("0.33.0", 656), ("0.34.0", 528)):
        own = simulate(
            _inputs(
                C.recipe_input(
                    "stock",
                    capability_family=120,
                    kv_cache_dtype=requested,
                    drafter_kv_cache_dtype="auto",
                    vllm_version=version,
                )
            )
        )
        assert (own.target_kv_dtype, own.drafter_kv_dtype) == ("fp8_ds_mla", "auto")
        mla = [r for r in own.with_drafter.layers if r.role == "mla_latent"]
        assert {r.bytes_per_token for r in mla} == {row}
        assert {r.real_page_bytes for r in mla} == {own.with_drafter.block_size * row}


@pytest.mark.parametrize("requested", ["bfloat16", "float16", "fp8_e5m2"])
def test_family_120_rejects_other_target_kv_dtypes(requested):
    """FLASHINFER_MLA_SPARSE_SM120 is the only sparse MLA backend vLLM lists
    for SM12x, and it does not take these dtypes: vLLM finds no backend."""
    report = simulate(
        _inputs(C.recipe_input("stock", capability_family=120, kv_cache_dtype=requested, drafter_kv_cache_dtype="auto"))
    )
    for plan in (report.with_drafter, report.without_drafter, report.target_only_same_spec):
        assert plan.error.startswith("ValueError: No valid attention backend")


def test_json_roundtrip_and_bad_input():
    data = C.recipe_input("overlay")
    gi = _inputs(data)
    assert GeometryInputs.from_json(gi.to_json()) == gi
    with pytest.raises(BadInput):
        GeometryInputs.from_json(dict(data, tensor_parallel_size="1"))
    with pytest.raises(BadInput):
        GeometryInputs.from_json(dict(data, bogus=1))
    with pytest.raises(BadInput):
        simulate(_inputs(dict(data, kv_cache_dtype="nvfp4")))


def test_kimi_linear_numbers_from_config_arithmetic():
    """Kimi-Linear-48B shape, TP1, fp8, num_spec 7: KDA page = conv
    (3 x 32 x 128) x (4 - 1 + 7) x 2 B + recurrent 32 x 128 x 128 x 4 B;
    MLA 576 B/token; block = 128 x ceil(KDA page / (128 x 576))."""
    t = C.kimi_linear_config()
    kda = 3 * 32 * 128 * (4 - 1 + 7) * 2 + 32 * 128 * 128 * 4
    assert kda == 2_342_912
    block = 128 * -(-kda // (128 * 576))
    for behaviour in ("stock", "overlay"):
        r = simulate(_inputs(C.recipe_input(behaviour, target_config=t, kv_cache_dtype="fp8")))
        assert r.model_kind == "kimi_linear"
        base = r.target_only_same_spec
        assert base.error is None and base.block_size == block == 4096
        assert base.target_attention_page == block * 576
        assert base.mamba_page_size_padded == block * 576
        assert base.grouping_path == "unified" and base.layout == "LBNHC"
        kda_rows = [row for row in base.layers if row.role == "kda"]
        assert len(kda_rows) == 20 and kda_rows[0].real_page_bytes == kda
        if behaviour == "stock":  # the drafter's page is the largest, MLA cannot be padded
            assert r.with_drafter.error.startswith("NotImplementedError")
        else:
            d = [row for row in r.with_drafter.layers if row.owner == "drafter"]
            assert {row.block_size for row in d} == {block * 576 // 2048}


def test_capacity_rule_when_the_drafter_makes_blocks_smaller():
    """Kimi Linear (7 MLA layers) with the series' drafter: bytes per block
    shrink either way; what decides is how many groups the MLA layers end up in."""
    five = simulate(_inputs(kimi_input("overlay", 5, False)))
    v5 = check(five)
    w, base = five.with_drafter, five.target_only_same_spec
    mla_groups = [g for g in w.groups if g.spec_class == "MLAAttentionSpec"]
    # groups hold as many layers as the drafter's 5: 7 MLA layers -> 2 groups
    assert len(mla_groups) == -(-7 // 5) == 2
    assert w.bytes_per_block < base.bytes_per_block and w.num_blocks > base.num_blocks
    assert v5.kv_tokens_with == w.num_blocks * 4096 // 2
    assert v5.kv_tokens_without == base.num_blocks * 4096
    assert not v5.passed and v5.reasons[0].startswith(
        f"KV capacity {v5.kv_tokens_with:,} tokens with the drafter vs {v5.kv_tokens_without:,} for the target alone"
    )
    # a one-layer drafter: every group holds one layer, 7 MLA groups of 1/7 the
    # bytes each; capacity = blocks x 4096 / 7 holds, and the gate passes
    one = simulate(_inputs(kimi_input("overlay", 1, False)))
    v1 = check(one)
    assert len([g for g in one.with_drafter.groups if g.spec_class == "MLAAttentionSpec"]) == 7
    assert one.with_drafter.bytes_per_block < one.target_only_same_spec.bytes_per_block
    assert v1.kv_tokens_with == one.with_drafter.num_blocks * 4096 // 7 >= v1.kv_tokens_without
    assert v1.passed, v1.reasons


def test_align_not_modelled_for_gdn_targets():
    import random

    data = C.recipe_input("stock", target_config=C.qwen3_next_target(random.Random(1)), **C.prefix_caching(True))
    with pytest.raises(BadInput, match="Qwen3-Next"):
        simulate(_inputs(data))


@pytest.mark.parametrize(
    "nodes,why",
    [
        (0, "nodes must be a positive integer, got 0"),
        (True, "nodes must be a positive integer, got True"),
        (4, "tensor_parallel_size 2 is not a multiple of nodes 4"),
    ],
)
def test_nodes_must_split_the_tp_group(nodes, why):
    with pytest.raises(BadInput, match=why):
        _inputs(C.recipe_input("stock", tensor_parallel_size=2, nodes=nodes))


def test_nodes_do_not_change_the_per_rank_geometry():
    one = simulate(
        _inputs(C.recipe_input("stock", capability_family=120, tensor_parallel_size=4, drafter_kv_cache_dtype="auto"))
    )
    two = simulate(
        _inputs(
            C.recipe_input(
                "stock", capability_family=120, tensor_parallel_size=4, drafter_kv_cache_dtype="auto", nodes=2
            )
        )
    )
    assert (two.nodes, two.ranks_per_node) == (2, 2)
    assert two.with_drafter == one.with_drafter


def test_the_simulator_classifies_the_target_as_the_gate_does():
    """One classifier (model_config.read_target) for the gate's config check, the prefix-caching
    resolution and the simulator: a target whose first architecture vLLM runs as another model
    (LlamaForCausalLM before Qwen3NextForCausalLM) is refused by each, naming the key."""
    from geometry.model.config import ConfigInvalid, check_target
    from geometry.model.inputs import resolve_prefix_caching

    target = dict(C.qwen3_next_target(random.Random(0)), architectures=["LlamaForCausalLM", "Qwen3NextForCausalLM"])
    data = C.recipe_input(
        "stock",
        target_config=target,
        drafter_config=None,
        drafter_kv_cache_dtype=None,
        num_speculative_tokens=0,
        drafter_attention_backend=None,
        **C.prefix_caching(False),
    )
    message = "target config: architectures: LlamaForCausalLM is not modelled"
    for refuse in (
        lambda: check_target(target),
        lambda: resolve_prefix_caching(target, None),
        lambda: simulate(_inputs(data)),
    ):
        with pytest.raises(ConfigInvalid, match=message):
            refuse()
    assert (
        simulate(_inputs(dict(data, target_config=dict(target, architectures=["Qwen3NextForCausalLM"])))).model_kind
        == "qwen3_next"
    )


def _qwen3_moe_input(**target_changes) -> dict:
    target = {k: v for k, v in dict(C.qwen3_moe_target(), **target_changes).items() if v is not None}
    return dict(C.qwen3_moe_matrix("stock")[0], target_config=target)


@pytest.mark.parametrize(
    "changes,key,why",
    [
        (dict(num_key_value_heads=None), "num_key_value_heads", "transformers' Qwen3MoeConfig default"),
        (dict(head_dim=None), "head_dim", "hidden_size // num_attention_heads"),
        (dict(num_key_value_heads=3), "num_key_value_heads", "3 does not divide num_attention_heads 8"),
        (dict(use_sliding_window=True), "use_sliding_window", "sliding-window layers of a Qwen3-MoE are not modelled"),
    ],
)
def test_qwen3_moe_config_the_simulator_would_misread_is_refused_naming_the_key(changes, key, why):
    """A Qwen3-MoE target without num_key_value_heads or head_dim (vLLM would take Qwen3MoeConfig's
    4 KV heads, or hidden_size // num_attention_heads), with KV heads not dividing its heads or with
    sliding-window layers is refused by the config check and by the gate's run, naming the key; the
    complete one runs as qwen3_moe."""
    from geometry.model.config import ConfigInvalid, check_target
    from geometry.verdict.gate_run import run_gate

    data = _qwen3_moe_input(**changes)
    message = f"target config: {key}: .*{why}"
    for refuse in (lambda: check_target(data["target_config"]), lambda: run_gate(_inputs(data))):
        with pytest.raises(ConfigInvalid, match=message):
            refuse()
    run = run_gate(_inputs(_qwen3_moe_input()))
    assert run.report.model_kind == "qwen3_moe" and run.report.with_drafter.num_blocks > 0
