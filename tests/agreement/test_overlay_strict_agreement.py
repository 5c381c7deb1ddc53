"""Strict overlay: patch 0001 refuses a drafter it cannot fit, unless told not to.

vLLM 0.34.0's own planning on the CPU (tests/support/engine_core.py: the V2
runner's spec collection, where patch 0001 runs, then
EngineCore._initialize_kv_caches) on the pristine tree with the series
applied. GLM53_OVERLAY_STRICT=1 (what the image sets) makes the fit's failure
an error naming the layer, the pages and the block that would fit; 0 or unset
keeps the stock block with a warning in the same words.
"""

from __future__ import annotations

import pytest
from overlay_helpers import (
    copy_tree,
    oracle_python,
    plan,
    pristine_dir,
    recipe_params,
    run_apply,
    run_plan,
)

pytestmark = pytest.mark.oracle

ENV = "GLM53_OVERLAY_STRICT"
# TP1, num_spec 7: B = 9,216 tokens, fp8 latent 512 B/token -> P = 4,718,592 B.
P = 9216 * 512
# A drafter with head_dim 80: 8 KV heads x 80 x (K + V) x 2 B = 2,560 B/token;
# 4,718,592 / 2,560 = 1,843.2 -> no block fits exactly.
MISFIT = {"draft_head_dim": 80}
MISFIT_BPT = 8 * 80 * 2 * 2
# Stock block for the drafter: the target's B; its page 9,216 x 2,560 B.
MISFIT_PAGE = 9216 * MISFIT_BPT
LAYER = "draft_model.model.layers.0.self_attn.attn"


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    site = copy_tree(pristine_dir(), tmp_path_factory.mktemp("strict") / "site")
    done = run_apply("--site-packages", site)
    assert done.returncode == 0, done.stderr
    return site


def _params(**extra):
    return dict(recipe_params(), tp=1, num_spec=7, kv_memory_gib=200, **extra)


def test_strict_raises_with_the_gates_words(patched):
    proc = run_plan(patched, [_params(**MISFIT)], oracle_python(), {ENV: "1"})
    assert proc.returncode != 0
    assert "OVERLAY_PLAN" not in proc.stdout
    (line,) = [
        line for line in proc.stderr.splitlines() if line.startswith("vllm.v1.worker.utils.DraftKVCacheFitError")
    ]
    assert f"layer {LAYER} (SlidingWindowSpec, 8 KV heads x head 80, {MISFIT_BPT} B/token)" in line
    assert f"at block 9216 (page {MISFIT_PAGE:,} B)" in line
    assert f"target MLA page P of {P:,} B" in line
    assert f"no drafter block fits exactly ({P:,} is not a multiple of {MISFIT_BPT} B/token)" in line
    assert f"set {ENV}=0 to keep the stock block size" in line


@pytest.mark.parametrize("value", ["0", None], ids=["0", "unset"])
def test_non_strict_keeps_stock_and_logs(patched, value):
    python = oracle_python()
    (result,), log = plan(patched, [_params(**MISFIT)], python, {ENV: value})
    (stock,), _ = plan(pristine_dir(), [_params(**MISFIT)], python)
    assert f"Draft KV cache: no exact fit of layer {LAYER}" in log
    assert "keeping the stock block size" in log
    draft = [g for g in result["groups"] if g["draft"]]
    assert draft and all(g["block_size"] == 9216 for g in draft)
    assert result["bytes_per_block"] == stock["bytes_per_block"]
    assert result["num_blocks"] == stock["num_blocks"]


def test_strict_fits_the_recipe_drafter(patched):
    """The recipe's drafter fits exactly (P / 4,096 B = 1,152): strict mode
    changes nothing for it."""
    (result,), log = plan(patched, [_params()], oracle_python(), {ENV: "1"})
    draft = [g for g in result["groups"] if g["draft"]]
    assert draft and all(g["block_size"] == P // (8 * 128 * 2 * 2) == 1152 for g in draft)
    assert "no exact fit" not in log


def test_other_values_are_refused(patched):
    proc = run_plan(patched, [_params()], oracle_python(), {ENV: "yes"})
    assert proc.returncode != 0
    assert f"ValueError: {ENV} must be 0 or 1, got 'yes'" in proc.stderr


def test_image_is_strict(tmp_path, monkeypatch):
    """The rendered Dockerfile sets strict mode for the served image."""
    from recipe_copies import copy_recipe, pinned

    from stackbuild.core.recipe import load_recipe
    from stackbuild.image.plan import make_plan
    from stackbuild.image.render import render

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764460800")
    text = render(make_plan(load_recipe(copy_recipe(tmp_path, pinned)), owner="acme"))
    assert [line for line in text.splitlines() if ENV in line and line.startswith("ENV")] == [f"ENV {ENV}=1"]
