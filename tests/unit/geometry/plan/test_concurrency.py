"""Requests at once, max_num_seqs and how close the capacity comes to the KV
memory, for the default recipe, derived by hand from vLLM 0.34.0's rules
(vLLM's own count: test_concurrency_oracle.py; the overlay's, which these are:
tests/agreement/test_overlay_planning_agreement.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import default_recipe_figures as F
import pytest
from support.repo import REPO

from geometry.model.inputs import GeometryInputs
from geometry.plan.concurrency import ContextTooLong, concurrency, contexts_for
from geometry.plan.simulate import simulate
from geometry.verdict.gate import judge
from geometry.verdict.table import render_text
from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import load_recipe

DEFAULT = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"


def _default(**changes) -> GeometryInputs:
    return GeometryInputs.from_json(dict(gate_input(load_recipe(DEFAULT)).to_json(), **changes))


def test_default_recipe_by_hand():
    """B = 9,216, 2,892 blocks (2,891 to grant: one null block).  On a GB300 `vllm serve` batches 16,384
    tokens (>= 160 GiB: EngineArgs.get_batch_defaults), two batches in flight; DFlash reserves 7 + 1
    lookahead slots. A request of 1M tokens is a prompt of 1,048,575 tokens (tests/default_recipe_figures.py
    works it out step by step): 113 chunks (the mamba split ends them on 9,216, the last, 16,383 tokens,
    holds FlashKDA's prefill checkpoint), after which it holds 114 MLA blocks, 4 KDA groups x (3 states +
    7 speculative + 1 checkpoint), 1 kpool-tail ring block and 25 drafter window blocks: 184; admission asks
    114 + 4 x 9 + 1 + 32 = 183; 1 + (2,891 - 184) // 184 = 15 at once (vLLM logs 2,892 / 187 = 15.47, its
    specs counting 2 + 7 + 1 state and 32 window blocks)."""
    inputs = _default()
    assert inputs.max_num_batched_tokens == 16384
    c = concurrency(simulate(inputs), inputs)
    assert c.in_flight_tokens == 32768
    million = c.fits["with_drafter"][0]
    assert (million.blocks_per_request, million.attention_blocks, million.admitted, million.vllm_max_concurrency) == (
        F.PREFIX_ON.blocks_one_1m_request_holds,
        114,
        F.PREFIX_ON.requests_of_1m_at_once,
        F.PREFIX_ON.vllm_max_concurrency_1m,
    )
    # 128K, a prompt of 131,071: chunks of 9,216 up to 13 x 9,216 = 119,808, then 11,263 with the checkpoint
    # (at 113 x 1,152 = 130,176); processed 119,808 - 9,216 = 110,592. MLA ceil(131,079 / 9,216) = 15; KDA
    # states in blocks 11, 12 and 14 + 7 + 1 = 11; window ceil(131,079 / 1,152) = 114 less (110,592 - 2,047)
    # // 1,152 = 94: 20; 15 + 44 + 1 + 20 = 80. Admission 15 + 36 + 1 + 32 = 84: 1 + (2,891 - 84) // 80 = 36.
    assert (c.fits["with_drafter"][1].blocks_per_request, c.fits["with_drafter"][1].admitted) == (80, 36)
    # 32K, a prompt of 32,767: 9,216, 9,216, 14,335 (the checkpoint at 28 x 1,152 = 32,256); processed 9,216.
    # MLA ceil(32,775 / 9,216) = 4; KDA states in blocks 0, 1, 3 + 7 + 1 = 11; window ceil(32,775 / 1,152) =
    # 29 less (9,216 - 2,047) // 1,152 = 6: 23; 4 + 44 + 1 + 23 = 72. Admission 4 + 36 + 1 + min(29, 32) = 70:
    # 1 + (2,891 - 72) // 72 = 40.
    assert (c.fits["with_drafter"][2].blocks_per_request, c.fits["with_drafter"][2].admitted) == (72, 40)
    # Without speculation: B = 8,576 (KDA state 24,576 x 3 x 2 + 4,194,304 = 4,341,760 B; 128 x 67), 3,103
    # blocks, no drafter, no lookahead. Chunks of 8,576 up to 121 x 8,576 = 1,037,696, then 10,879 with the
    # checkpoint (at 122 x 8,576); processed 1,037,696 - 8,576. MLA ceil(1,048,575 / 8,576) = 123; KDA states
    # in blocks 119, 120, 122 + 1 checkpoint = 4; + 1 ring: 123 + 16 + 1 = 140. Admission 123 + 4 x min(123,
    # 2) + 1 = 132: 1 + (3,102 - 140) // 140 = 22 (vLLM logs 3,103 / (123 + 4 x 3 + 1) = 22.82).
    alone = c.fits["without_drafter"][0]
    assert (alone.blocks_per_request, alone.admission_blocks, alone.admitted, alone.vllm_max_concurrency) == (
        140,
        132,
        22,
        22.82,
    )


def test_default_recipe_at_schedulerconfigs_batch_by_hand():
    """The same recipe at 2,048 batched tokens (serving.max_num_batched_tokens: 2048, GB10's default), 4,096
    in flight. The block, 9,216, is wider than a step: the mamba split advances 2,048 at a time and stops on
    each block boundary (5 chunks a block: 4 x 2,048 + 1,024). In the prompt's last block (from 113 x 9,216 =
    1,041,408) 3 x 2,048, then the split stops at the last hash boundary 1,048,320 (hits every 1,152:
    768 tokens), then 255; no chunk can hold FlashKDA's checkpoint (it must start 1,152 before it). After the
    last, with 768 in flight (processed 1,047,552): 114 MLA; KDA the states from block 113 on: 1 + 7; the
    window ceil(2^20 / 1,152) = 911 less (1,047,552 - 2,047) // 1,152 = 907: 4; + 1 ring: 114 + 32 + 1 + 4 =
    151. Admission: 114 + 4 x 9 + 1 + min(911, ceil(6,143 / 1,152) + 1 = 7) = 158: 1 + (2,891 - 158) // 151 =
    19 (vLLM logs 2,892 / (114 + 40 + 1 + 7) = 17.85)."""
    inputs = _default(max_num_batched_tokens=2048)
    c = concurrency(simulate(inputs), inputs)
    assert c.contexts == (1_048_576, 131_072, 32_768)
    million = c.fits["with_drafter"][0]
    assert (million.blocks_per_request, million.admission_blocks, million.admitted, million.vllm_max_concurrency) == (
        151,
        158,
        19,
        17.85,
    )
    assert million.prefill_chunks == 113 * 5 + 5
    # Without speculation: B = 8,576 > 2,048: 5 chunks a block (4 x 2,048 + 384); the prompt's last block (from
    # 122 x 8,576 = 1,046,272) 2,048 then 255. After the last (2,048 in flight, processed 1,046,272): 123 MLA,
    # KDA the states in blocks 121 and 122 (no checkpoint: the last chunk starts past it), + 1 ring: 123 + 8 +
    # 1 = 132. Admission 123 + 4 x min(123, 1 + 1) + 1 = 132: 1 + (3,102 - 132) // 132 = 23.
    alone = c.fits["without_drafter"][0]
    assert (alone.blocks_per_request, alone.admitted, alone.prefill_chunks) == (132, 23, 122 * 5 + 2)
    h = c.headroom
    # 11 MLA layers x 512 B (fp8 latent) + 11 indexer layers x 33 B per token.
    assert h.attention_bytes_per_token == 11 * 512 + 11 * 33
    assert h.ideal_tokens == 161_061_273_600 // 5995
    assert round(100 * h.share, 2) == 99.21
    assert h.block_padding_bytes + h.below_one_block_bytes + h.capacity_tokens * 5995 == 161_061_273_600


def test_prefix_caching_off_holds_fewer_state_blocks():
    """mamba_cache_mode "none": 1 + 7 state blocks per KDA group, no split (64 chunks of 16,384), and the
    window keeps 31 (tests/default_recipe_figures.py): 114 + 32 + 1 + 31 = 178, 16 at once."""
    inputs = _default(enable_prefix_caching=False, mamba_cache_mode="none")
    report = simulate(inputs)
    fit = concurrency(report, inputs).fits["with_drafter"][0]
    assert (fit.blocks_per_request, fit.prefill_chunks, fit.admitted) == (114 + 4 * 8 + 1 + 31, 64, 16)
    assert (fit.blocks_per_request, fit.admitted) == (
        F.PREFIX_OFF.blocks_one_1m_request_holds,
        F.PREFIX_OFF.requests_of_1m_at_once,
    )


def test_max_num_seqs_above_the_pool_is_refused_and_above_the_fit_warned():
    """vLLM 0.34.0 refuses to start (CompilationConfig.resolve_cudagraph_mode_and_sizes) when
    max_num_seqs exceeds the pool's blocks with mamba layers and full CUDA graphs: the gate fails;
    above the requests at once at a listed length it only warns."""
    too_many = _default(max_num_seqs=2893)
    report = simulate(too_many)
    verdict = judge(report, too_many)
    assert not verdict.passed
    assert any(r.startswith("max_num_seqs 2,893 exceeds the 2,892 blocks") for r in verdict.reasons)
    fine = _default(max_num_seqs=2892)
    assert judge(simulate(fine), fine).passed
    c = concurrency(simulate(fine), fine, [32768])
    assert c.refusals == () and len(c.warnings) == 2
    # The requests at once (the together model; vLLM's scheduler's figures: tests/default_recipe_figures.py).
    assert f"{F.TOGETHER_OVERLAY[0]} requests of 1,048,576 tokens (max_model_len)" in c.warnings[0]
    assert f"{F.TOGETHER_OVERLAY[2]} requests of 32,768 tokens (the shortest listed context)" in c.warnings[1]
    quiet = _default(max_num_seqs=15)
    assert concurrency(simulate(quiet), quiet).warnings == ()


def test_contexts():
    assert contexts_for(131_072) == (131_072, 32_768)
    assert contexts_for(1_048_576, [8192]) == (1_048_576, 8192)
    with pytest.raises(ContextTooLong, match="above max_model_len 1,048,576"):
        contexts_for(1_048_576, [2 << 20])
    # vLLM refuses an empty prompt and one that leaves no room for an output token
    with pytest.raises(ContextTooLong, match=r"^context 1 is below 2 tokens \(a request holds a prompt token"):
        contexts_for(1_048_576, [1])
    assert contexts_for(1_048_576, [2]) == (1_048_576, 2)


def test_alignment_said_out_loud():
    """serving.block_size 4096 becomes 12,288: the smallest multiple of 4,096 whose 512 B/token
    attention page (2 MiB per 4,096 tokens) holds the 4,685,824 B KDA state (3 x 4,096)."""
    inputs = _default(block_size=4096)
    report = simulate(inputs)
    assert (report.requested_block_size, report.with_drafter.block_size) == (4096, 12288)
    text = render_text(report, judge(report, inputs), concurrency(report, inputs))
    assert (
        "block_size 4096 -> 12,288 (vLLM's hybrid alignment: one block's target attention page "
        "must hold the 4,685,824 B mamba state page, so the block grows in steps of 4,096)"
    ) in text
    assert "block_size 9216 ->" not in render_text(simulate(_default()))


def test_geometry_json_carries_concurrency_and_the_context_flag():
    run = subprocess.run(
        [sys.executable, "build.py", "geometry", "--json", "--context", "8192,32K"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    c = data["concurrency"]
    assert c["contexts"] == [1_048_576, 32_768, 8192]
    # 8K, a prompt of 8,191 inside one block: the split stops at the last hash boundary 7 x 1,152 = 8,064,
    # then 127 (no chunk can hold FlashKDA's checkpoint: it must lie in a later block than the start's).
    # After both: 1 MLA block, 4 x (1 state + 7), 1 ring, the window ceil(8,199 / 1,152) = 8: 42; the second
    # chunk also copies the state keyed at 8,064 (inside a KDA block) into one new block per KDA group:
    # it needs 42 + 4 = 46 free. 1 + (2,891 - 46) // 42 = 68.
    assert [f["admitted"] for f in c["fits"]["with_drafter"]] == [15, 40, 68]
    assert data["report"]["requested_block_size"] is None
    bad = subprocess.run(
        [sys.executable, "build.py", "geometry", "--context", "12x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert "'12x' is not a positive token count" in bad.stderr and "Traceback" not in bad.stderr


def test_serving_max_num_seqs_reaches_the_serve_argv_and_the_gate(tmp_path):
    from recipe_copies import copy_recipe

    from stackbuild.core.errors import RecipeError
    from stackbuild.core.serve_args import serve_argv

    path = copy_recipe(tmp_path, lambda data: data["serving"].update(max_num_seqs=3000))
    recipe = load_recipe(path)
    argv = serve_argv(recipe)
    assert argv[argv.index("--max-num-seqs") + 1] == "3000"
    assert gate_input(recipe).max_num_seqs == 3000
    run = subprocess.run(
        [sys.executable, "build.py", "geometry", "--recipe", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 5
    assert "max_num_seqs 3,000 exceeds the 2,892 blocks of the KV pool" in run.stderr
    twice = copy_recipe(tmp_path / "b", lambda data: data["serving"].update(extra_args=["--max-num-seqs", "8"]))
    with pytest.raises(RecipeError, match=r"--max-num-seqs is generated from serving.max_num_seqs"):
        load_recipe(twice)


def test_the_batch_vllm_serve_picks_for_the_gpu_unless_the_recipe_says(tmp_path):
    """`vllm serve`'s max_num_batched_tokens (EngineArgs.get_batch_defaults): by the GPU's memory, per
    rank on vLLM's CPU platform, the recipe's serving.max_num_batched_tokens over both."""
    from recipe_copies import copy_recipe

    from stackbuild.core.errors import RecipeError
    from stackbuild.core.gpus import serve_batched_tokens
    from stackbuild.core.serve_args import serve_argv

    assert [serve_batched_tokens(gpu, 1) for gpu in ("GB300", "B200", "H100", "GB10", "RTX 5090")] == [
        16384,
        16384,
        8192,
        2048,
        2048,
    ]
    assert serve_batched_tokens("none", 2) == 4096 and serve_batched_tokens("a GPU of tomorrow", 1) is None
    assert (
        gate_input(load_recipe(REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml")).max_num_batched_tokens
        == 2048
    )
    path = copy_recipe(tmp_path, lambda data: data["serving"].update(max_num_batched_tokens=4096))
    recipe = load_recipe(path)
    argv = serve_argv(recipe)
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "4096"
    inputs = gate_input(recipe)
    assert inputs.max_num_batched_tokens == 4096 and concurrency(simulate(inputs), inputs).in_flight_tokens == 8192
    twice = copy_recipe(
        tmp_path / "b", lambda data: data["serving"].update(extra_args=["--max-num-batched-tokens", "8192"])
    )
    with pytest.raises(RecipeError, match=r"--max-num-batched-tokens is generated from serving.max_num_batched_tokens"):
        load_recipe(twice)
    zero = copy_recipe(tmp_path / "c", lambda data: data["serving"].update(max_num_batched_tokens=0))
    with pytest.raises(RecipeError, match=r"serving.max_num_batched_tokens: must be a positive number of tokens"):
        load_recipe(zero)


def test_flashkda_holds_a_prefill_checkpoint_block_where_vllm_picks_it():
    """vLLM 0.34.0 (vllm/models/glm5next/common/kda.py): `_resolve_kda_prefill_backend` picks FlashKDA on
    CUDA major 9, 10 or 12 for a bfloat16 model, KDA head_dim 128 and a bounded gate, and
    `Glm5NextLinearAttention.get_kv_cache_spec` then gives each KDA spec one prefill-checkpoint block,
    which `MambaSpec.max_memory_usage_bytes` counts in "align" mode only. The default recipe has all four
    (GB300: family 100; `linear_head_dim` 128; bf16; `linear_lower_bound` -5.0)."""
    from geometry.model.architectures.glm5next import kda_prefill_backend

    tc = load_recipe(DEFAULT).target_config
    assert (tc["linear_head_dim"], tc["linear_lower_bound"]) == (128, -5.0)
    assert [kda_prefill_backend(tc, family, "bfloat16") for family in (90, 100, 120)] == ["flashkda"] * 3
    assert kda_prefill_backend(tc, 80, "bfloat16") == "triton"  # Ampere: major 8
    assert kda_prefill_backend(tc, 100, "float16") == "triton"
    assert kda_prefill_backend(dict(tc, linear_lower_bound=None), 100, "bfloat16") == "triton"  # unbounded gate
    assert kda_prefill_backend(dict(tc, linear_head_dim=64), 100, "bfloat16") == "triton"

    def kda_blocks(inputs):
        return {g.per_request.fixed for g in simulate(inputs).with_drafter.groups if g.spec_class == "MambaSpec"}

    assert kda_blocks(_default()) == {2 + 7 + 1}  # "align": the copy, 7 speculative, the checkpoint
    assert kda_blocks(_default(enable_prefix_caching=False, mamba_cache_mode="none")) == {1 + 7}
    unbounded = dict(tc, linear_lower_bound=None)
    assert kda_blocks(_default(target_config=unbounded)) == {2 + 7}
