"""vLLM 0.34.0's own KV planning, pristine vs patched, for the default recipe.

The series is applied to a copy of the pristine tree; planning runs on the
CPU in subprocesses whose ``sys.path`` starts with that tree:

* ``geometry.oracle.plan_with_vllm`` (real platform block-size alignment,
  real layer ``get_kv_cache_spec`` methods, the V2 runner's spec collection
  and the planner);
* the engine-core path (``python -m support.engine_core_cli
  --engine-core``), which also runs ``EngineCore._initialize_kv_caches`` and
  so covers patch 0002 (the global block size) as well.

Default recipe: GLM-5.3-Flash (KDA + MLA, fp8 KV) with the BF16 DFlash2
drafter (8 KV heads x 128, 5 sliding-window layers, KV dtype auto = bf16),
capability family 100, 200 GiB of KV memory; TP 1/2/4 x num_spec 1/3/7.
"Without drafter" keeps the same target geometry (num_spec sizes the
target's own KDA and kpool-tail state) and drops the drafter's layers.
"""

from __future__ import annotations

import json
import os
import subprocess

import default_recipe_figures as F
import pytest
from overlay_helpers import (
    RECIPE_CONFIGS,
    REPO,
    copy_tree,
    oracle_python,
    plan,
    pristine_dir,
    recipe_params,
    run_apply,
)

from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

GIB = 1 << 30
TPS = (1, 2, 4)
NUM_SPECS = (1, 3, 7)
GRID = [(tp, ns) for tp in TPS for ns in NUM_SPECS]
MEMORY_GIB = 200

pytestmark = pytest.mark.oracle


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    pristine = pristine_dir()
    python = oracle_python()
    stock = copy_tree(pristine, tmp_path_factory.mktemp("stock") / "site")
    patched = copy_tree(pristine, tmp_path_factory.mktemp("patched") / "site")
    done = run_apply("--site-packages", patched)
    assert done.returncode == 0, done.stderr
    return {"stock": stock, "patched": patched, "python": python}


@pytest.fixture(scope="module")
def harness(trees):
    base = dict(recipe_params(), kv_memory_gib=MEMORY_GIB)
    cases = [dict(base, tp=tp, num_spec=ns, with_drafter=w) for tp, ns in GRID for w in (True, False)]
    out = {}
    for name in ("stock", "patched"):
        results, log = plan(trees[name], cases, trees["python"])
        out[name] = {(c["tp"], c["num_spec"], c["with_drafter"]): r for c, r in zip(cases, results)}
        out[name + "_log"] = log
    return out


ORACLE_DRIVER = r"""
import json, sys
import vllm
from geometry.model.inputs import GeometryInputs
from geometry.oracle.plan import plan_with_vllm

configs, grid, memory, recipe_input = json.loads(sys.argv[1])
target = json.load(open(configs + "/target.config.json"))
drafter = json.load(open(configs + "/drafter.config.json"))

def summary(p):
    drafter_rows = [l for l in p.layers if l.owner == "drafter"]
    return {
        "error": p.error,
        "block_size": p.block_size,
        "bytes_per_block": p.bytes_per_block,
        "num_blocks": p.num_blocks,
        "tokens_fit": p.tokens_fit,
        "target_attention_page": p.target_attention_page,
        "draft_padded": any(l.padded for l in drafter_rows),
        "draft_blocks": sorted({l.block_size for l in drafter_rows}),
        "draft_pages": sorted({l.page_bytes for l in drafter_rows}),
        "draft_bytes_per_token": sorted({l.bytes_per_token for l in drafter_rows}),
        "kda_pages": sorted({(l.real_page_bytes, l.page_bytes) for l in p.layers if l.role == "kda"}),
    }

out = []
for tp, ns in grid:
    inputs = GeometryInputs.from_json({
        "target_config": target, "drafter_config": drafter,
        "tensor_parallel_size": tp, "kv_cache_dtype": "auto",
        "drafter_kv_cache_dtype": None, "num_speculative_tokens": ns,
        "capability_family": 100, "kv_cache_memory_bytes": memory,
        "drafter_attention_backend": "FLASH_ATTN",
    })
    report = plan_with_vllm(inputs)
    out.append({"with": summary(report.with_drafter),
                "without": summary(report.target_only_same_spec)})
recipe = plan_with_vllm(GeometryInputs.from_json(recipe_input))
print("ORACLE_VLLM " + vllm.__file__)
print("ORACLE " + json.dumps(out))
print("ORACLE_RECIPE " + json.dumps({"with": summary(recipe.with_drafter),
                                     "without": summary(recipe.target_only_same_spec)}))
"""


@pytest.fixture(scope="module")
def oracle(trees):
    out = {}
    for name in ("stock", "patched"):
        site = trees[name]
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(site), str(REPO)]),
            VLLM_TARGET_DEVICE="cpu",
            PYTHONDONTWRITEBYTECODE="1",
        )
        proc = subprocess.run(
            [
                trees["python"],
                "-c",
                ORACLE_DRIVER,
                json.dumps(
                    [str(RECIPE_CONFIGS), GRID, MEMORY_GIB * GIB, gate_input(load_recipe(DEFAULT_RECIPE)).to_json()]
                ),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            env=env,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stderr[-6000:]
        lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith("ORACLE"))
        assert lines["ORACLE_VLLM"].startswith(str(site)), lines["ORACLE_VLLM"]
        out[name] = dict(zip(GRID, json.loads(lines["ORACLE"])))
        out[name + "_recipe"] = json.loads(lines["ORACLE_RECIPE"])
    return out


def _draft_groups(result):
    return [g for g in result["groups"] if g["draft"]]


@pytest.mark.parametrize("tp,ns", GRID)
def test_patched_block_cost_equals_no_drafter(harness, tp, ns):
    with_d = harness["patched"][(tp, ns, True)]
    without = harness["patched"][(tp, ns, False)]
    assert with_d["bytes_per_block"] == without["bytes_per_block"]
    assert with_d["num_blocks"] == without["num_blocks"]
    assert not with_d["draft_padded"]
    page = with_d["target_mla_page"]
    per_token = 8 // min(8, tp) * 128 * 2 * 2  # drafter KV heads per rank, K+V, bf16
    for group in _draft_groups(with_d):
        assert group["page_bytes"] == page
        assert group["block_size"] == page // per_token
    # Patch 0002: the drafter's smaller block does not lower the global one.
    assert with_d["global_block_size"] == with_d["target_block_size"]
    assert without["global_block_size"] == with_d["target_block_size"]


@pytest.mark.parametrize("tp,ns", GRID)
def test_stock_drafter_inflates_blocks(harness, tp, ns):
    with_d = harness["stock"][(tp, ns, True)]
    without = harness["stock"][(tp, ns, False)]
    # Without drafter layers the patches change nothing.
    assert without["bytes_per_block"] == harness["patched"][(tp, ns, False)]["bytes_per_block"]
    groups = _draft_groups(with_d)
    assert groups and all(g["block_size"] == with_d["target_block_size"] for g in groups)
    widest_draft = max(g["group_bytes"] for g in groups)
    widest_target = max(g["group_bytes"] for g in with_d["groups"] if not g["draft"])
    if tp in (1, 2):
        # 8 or 4 KV heads per rank: 8x / 4x the latent's bytes per token; the
        # drafter's group is the widest and every block costs its bytes.
        assert widest_draft > widest_target
        assert with_d["bytes_per_block"] > without["bytes_per_block"]
        assert with_d["num_blocks"] < without["num_blocks"]
    else:
        # TP4: 2 KV heads per rank, 2x the latent's bytes per token; the
        # drafter's 5 pages (10 P) fit under the widest target group (11 MLA
        # layers' latent + indexer pages): stock vLLM does not inflate here.
        assert widest_draft <= widest_target
        assert with_d["bytes_per_block"] == without["bytes_per_block"]


def test_fit_is_logged(harness):
    assert "Draft KV cache: layer draft_model.model.layers.0.self_attn.attn" in (harness["patched_log"])
    assert "Draft KV cache" not in harness["stock_log"]


def test_no_exact_fit_keeps_stock_and_logs(trees):
    """A drafter whose bytes per token do not divide the target page (head
    dim 80 -> 2,560 B per token at TP1; P = 9 x 2^19 B) keeps the stock
    block, and says so."""
    params = dict(recipe_params(), draft_head_dim=80, tp=1, num_spec=7, kv_memory_gib=200)
    # Non-strict (GLM53_OVERLAY_STRICT unset); strict mode: test_overlay_strict.py.
    unset = {"GLM53_OVERLAY_STRICT": None}
    (patched,), log = plan(trees["patched"], [params], trees["python"], unset)
    (stock,), _ = plan(trees["stock"], [params], trees["python"], unset)
    assert "no exact fit" in log and "no drafter block fits exactly" in log
    assert patched["bytes_per_block"] == stock["bytes_per_block"]
    assert patched["num_blocks"] == stock["num_blocks"]
    assert [g["block_size"] for g in _draft_groups(patched)] == [g["block_size"] for g in _draft_groups(stock)]


@pytest.mark.parametrize("tp,ns", GRID)
def test_oracle_patched_equals_no_drafter(oracle, tp, ns):
    r = oracle["patched"][(tp, ns)]
    assert r["with"]["error"] is None, r["with"]["error"]
    assert r["with"]["bytes_per_block"] == r["without"]["bytes_per_block"]
    assert r["with"]["num_blocks"] == r["without"]["num_blocks"]
    assert not r["with"]["draft_padded"]
    assert r["with"]["draft_pages"] == [r["with"]["target_attention_page"]]


@pytest.mark.parametrize("tp,ns", GRID)
def test_oracle_stock_inflates(oracle, tp, ns):
    r = oracle["stock"][(tp, ns)]
    if tp in (1, 2):
        assert r["with"]["bytes_per_block"] > r["without"]["bytes_per_block"]
        assert r["with"]["num_blocks"] < r["without"]["num_blocks"]
    else:  # see test_stock_drafter_inflates_blocks
        assert r["with"]["bytes_per_block"] == r["without"]["bytes_per_block"]


@pytest.mark.parametrize("tp,ns", GRID)
def test_harness_agrees_with_oracle(harness, oracle, tp, ns):
    for name in ("stock", "patched"):
        h = harness[name][(tp, ns, True)]
        o = oracle[name][(tp, ns)]["with"]
        assert (h["target_block_size"], h["bytes_per_block"], h["num_blocks"]) == (
            o["block_size"],
            o["bytes_per_block"],
            o["num_blocks"],
        ), name


@pytest.mark.parametrize("tree", ["stock", "patched"])
def test_default_recipe_figures_are_what_vllm_plans(oracle, tree):
    """The default recipe's figures (stock vLLM 0.34.0 / with the overlay, worked
    out by hand in tests/unit/geometry/plan/test_simulate.py; the documents' verdict table shows them) are
    what vLLM's own planner gives for the recipe's gate input on the pristine and
    on the patched tree."""
    column = F.STOCK if tree == "stock" else F.OVERLAY
    with_d, alone = oracle[tree + "_recipe"]["with"], oracle[tree + "_recipe"]["without"]
    assert with_d["error"] is None and alone["error"] is None, (with_d["error"], alone["error"])
    assert (with_d["block_size"], with_d["target_attention_page"]) == (column.target_block, column.mla_page)
    assert with_d["kda_pages"] == [[column.kda_real_page, column.kda_padded_page]]
    assert (with_d["draft_blocks"], with_d["draft_pages"]) == ([column.drafter_block], [column.drafter_page])
    assert with_d["draft_bytes_per_token"] == [F.DRAFTER_BYTES_PER_TOKEN]
    assert (with_d["bytes_per_block"], alone["bytes_per_block"]) == (
        column.bytes_per_block_with,
        column.bytes_per_block_without,
    )
    assert (with_d["num_blocks"], with_d["tokens_fit"]) == (column.blocks, column.kv_token_slots)


SCHEDULER_DRIVER = r"""
import json, sys
import vllm
from geometry.model.inputs import GeometryInputs
from support.oracle_concurrency import requests_until_refused

cases = json.loads(sys.argv[1])
print("SCHEDULED_VLLM " + vllm.__file__)
for name, raw in cases.items():
    counted = requests_until_refused(GeometryInputs.from_json(raw), [raw["max_model_len"]])
    print("SCHEDULED " + json.dumps({"name": name, "with": counted["with_drafter"][0]}))
"""


@pytest.fixture(scope="module")
def scheduled(trees):
    """vLLM's own engine core and scheduler (tests/support/oracle_concurrency.py) on the default recipe's gate
    input, prefix caching off and on, admitting requests of max_model_len tokens until it refuses one: on
    the pristine tree for the stock behaviour, on the patched one for the overlay's."""
    from geometry_cases import prefix_caching

    out = {}
    for tree, behaviour in (("stock", "stock"), ("patched", "overlay")):
        raw = gate_input(load_recipe(DEFAULT_RECIPE), vllm_behaviour=behaviour).to_json()
        cases = {str(on): dict(raw, **prefix_caching(on)) for on in (False, True)}
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(trees[tree]), str(REPO), str(REPO / "tests")]),
            VLLM_TARGET_DEVICE="cpu",
            PYTHONDONTWRITEBYTECODE="1",
        )
        proc = subprocess.run(
            [trees["python"], "-c", SCHEDULER_DRIVER, json.dumps(cases)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            universal_newlines=True,
            env=env,
            timeout=1800,
        )
        assert proc.returncode == 0, proc.stderr[-6000:]
        lines = [line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith("SCHEDULED")]
        assert dict(lines)["SCHEDULED_VLLM"].startswith(str(trees[tree]))
        for key, value in lines:
            if key == "SCHEDULED":
                row = json.loads(value)
                out[(tree, row["name"] == "True")] = row["with"]
    return out


@pytest.mark.parametrize("on", [False, True])
def test_default_recipe_requests_at_once_are_what_vllms_scheduler_admits(scheduled, on):
    """The default recipe's prefix-caching and requests-at-once figures (tests/default_recipe_figures.py,
    worked out by hand) are what vLLM's own engine core resolves and its scheduler admits on the patched
    tree (the overlay, which the recipe serves with), and the stock hit alignment on the pristine tree; and
    the simulator's count for the recipe's gate input is vLLM's."""
    from geometry_cases import prefix_caching

    from geometry.model.inputs import GeometryInputs
    from geometry.plan.concurrency import concurrency
    from geometry.plan.simulate import simulate

    figures = F.PREFIX_ON if on else F.PREFIX_OFF
    vllm = scheduled[("patched", on)]
    assert (vllm["in_flight_tokens"], vllm["lookahead_tokens"]) == (
        F.BATCHES_IN_FLIGHT * F.BATCHED_TOKENS,
        F.LOOKAHEAD,
    )
    assert (vllm["num_blocks"], vllm["cache_block_size"], vllm["scheduler_block_size"]) == (
        F.OVERLAY.blocks,
        F.OVERLAY.target_block,  # patch 0002: the drafter's 1,152 does not lower it
        figures.scheduler_block,
    )
    assert vllm["enable_caching"] is on
    if on:
        assert (vllm["hash_block_size"], vllm["cache_hit_alignment_tokens"]) == (
            figures.hash_block,
            figures.hits_every_overlay,
        )
        assert scheduled[("stock", on)]["cache_hit_alignment_tokens"] == figures.hits_every_stock
    groups = vllm["groups"]
    kda = [i for i, g in enumerate(groups) if g == "MambaSpec"]
    (mla,) = [i for i, g in enumerate(groups) if g == "MLAAttentionSpec"]
    (window,) = [i for i, g in enumerate(groups) if g == "SlidingWindowSpec"]
    assert len(kda) == F.KDA_GROUPS
    assert {vllm["sized_blocks"][i] for i in kda} == {figures.kda_state_blocks_sized}
    assert sum(vllm["sized_blocks"]) == figures.blocks_one_1m_request_sized
    assert vllm["vllm_max_concurrency"] == figures.vllm_max_concurrency_1m
    assert len(vllm["chunks"]) == figures.prefill_chunks_1m
    held = vllm["holdings"]
    assert {held[i] for i in kda} == {figures.kda_state_blocks_held}
    assert (held[mla], held[window]) == (
        -(-F.MAX_MODEL_LEN // F.OVERLAY.target_block),
        figures.drafter_window_blocks_held,
    )
    assert (vllm["blocks_per_request"], vllm["requests"]) == (
        figures.blocks_one_1m_request_holds,
        figures.requests_of_1m_at_once,
    )
    # The 16th (prefix caching on) or 17th (off) is refused at admission: it asks more than is left.
    assert vllm["refused"] == "refused at admission"
    assert vllm["free_blocks"] == F.POOL - figures.requests_of_1m_at_once * figures.blocks_one_1m_request_holds
    assert vllm["free_blocks"] < figures.admission_blocks_1m
    # The simulator, for the overlay and for stock, counts what vLLM's scheduler admits.
    for tree, behaviour in (("patched", "overlay"), ("stock", "stock")):
        raw = gate_input(load_recipe(DEFAULT_RECIPE), vllm_behaviour=behaviour).to_json()
        inputs = GeometryInputs.from_json(dict(raw, **prefix_caching(on)))
        fit = concurrency(simulate(inputs), inputs, []).fits["with_drafter"][0]
        counted = scheduled[(tree, on)]
        assert (fit.admitted, fit.group_blocks, fit.prefill_chunks, fit.vllm_max_concurrency) == (
            counted["requests"],
            tuple(counted["holdings"]),
            len(counted["chunks"]),
            counted["vllm_max_concurrency"],
        ), behaviour


def test_patch_0002_is_needed(trees, tmp_path):
    """With patch 0001 alone the drafter's smaller block drags the global
    block size (cache_config.block_size) below the target's block."""
    import shutil

    from overlay_helpers import SERIES

    from overlay.lock import read_series
    from tools import refresh_lock as refresh

    series = tmp_path / "series" / SERIES.name
    shutil.copytree(SERIES, series)
    first = read_series(series)[0]
    (series / "series").write_text(first + "\n")
    lock = refresh.compute_lock(series, pristine_dir())
    (series / "lock.json").write_text(json.dumps(lock))
    site = copy_tree(pristine_dir(), tmp_path / "site")
    done = run_apply("--series", series, "--site-packages", site)
    assert done.returncode == 0, done.stderr
    params = dict(recipe_params(), tp=1, num_spec=7, kv_memory_gib=MEMORY_GIB)
    (only_0001,), _ = plan(site, [params], trees["python"])
    (draft_group,) = _draft_groups(only_0001)
    assert only_0001["global_block_size"] == draft_group["block_size"]
    assert only_0001["global_block_size"] < only_0001["target_block_size"]
