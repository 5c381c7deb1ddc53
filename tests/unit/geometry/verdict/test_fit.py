"""`build.py fit`: the search for settings that pass the gate (geometry/verdict/fit.py).

The suggestions are re-planned by vLLM's own planner on the CPU with the overlay
applied (``plan_with_vllm`` in a process whose vLLM is a patched copy of the
pristine tree) and must pass the gate there too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import default_recipe_figures as F
import pytest
from models_support import misfit_drafter
from recipe_copies import copy_recipe
from support.repo import REPO

from geometry.model.inputs import GeometryInputs
from geometry.verdict.fit import search
from geometry.verdict.fit_keys import KEEPABLE
from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import load_recipe

RECIPES = REPO / "recipes"
GB10 = RECIPES / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml"
DEFAULT = RECIPES / "glm53-flash-dflash2-gb300" / "recipe.yaml"
# 7 KV heads x head_dim 248 x (K + V) x 2 B = 6,944 B/token = 2^5 x 7 x 31: the drafter's
# page equals the target's (512 B/token x B) in whole 16-token kernel blocks only when B is a
# multiple of 27,776, beyond twice vLLM's hybrid block 9,216.
UNFITTABLE = dict(misfit_drafter(), num_key_value_heads=7, num_attention_heads=28, head_dim=248)


def _inputs(path, **changes) -> GeometryInputs:
    return GeometryInputs.from_json(dict(gate_input(load_recipe(path)).to_json(), **changes))


def _build(*args, cwd=REPO):
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_gb10_without_block_size_finds_6144_or_better():
    result = search(_inputs(GB10, block_size=None))
    assert not result.recipe.passed  # vLLM's own 4,608: no exact drafter fit
    at_6144 = search(_inputs(GB10, block_size=6144), keep=frozenset(KEEPABLE)).recipe
    assert at_6144.passed
    best = result.ranked[0]
    assert (best.requests_at_max_model_len, best.kv_tokens) >= (at_6144.requests_at_max_model_len, at_6144.kv_tokens)
    assert best.changes[0][0] == "serving.block_size"


def test_fit_exit_codes_and_lines(tmp_path):
    ok = _build("fit", "--recipe", DEFAULT)
    assert ok.returncode == 0, ok.stderr
    # Requests of 1M at once: what vLLM 0.34.0's scheduler ran (tests/default_recipe_figures.py).
    assert ok.stdout.startswith(
        f"recipe: PASS  block_size 9,216  requests of max_model_len at once {F.TOGETHER_OVERLAY[0]}  "
    )
    gb10 = tmp_path / "gb10"
    gb10.mkdir()
    (gb10 / "recipe.yaml").write_text(
        "\n".join(line for line in GB10.read_text().splitlines() if not line.startswith("  block_size:"))
    )
    shutil.copytree(GB10.parent / "configs", gb10 / "configs")
    fails = _build("fit", "--recipe", gb10 / "recipe.yaml")
    assert fails.returncode == 5, fails.stderr
    assert "#1 block_size " in fails.stdout and "   serving.block_size: " in fails.stdout
    assert fails.stderr.startswith("error: ") and "passes with serving.block_size: " in fails.stderr
    data = json.loads(_build("fit", "--recipe", gb10 / "recipe.yaml", "--json").stdout)
    assert data["recipe"]["passed"] is False and data["suggestions"][0]["passed"] is True


def test_a_drafter_no_setting_fits_says_why_in_one_line(tmp_path):
    result = search(_inputs(DEFAULT, drafter_config=UNFITTABLE))
    assert result.ranked == ()
    assert result.why_none.startswith(
        "no setting passes: the drafter's 6,944 B/token fills the target's attention page (512 B/token x block) exactly"
    )
    assert "multiples of 27,776, beyond 2 x vLLM's hybrid block 9,216" in result.why_none
    assert "\n" not in result.why_none
    recipe = copy_recipe(tmp_path, lambda data: data["drafter"].pop("config_sha256"))
    (recipe.parent / "configs" / "drafter.config.json").write_text(json.dumps(UNFITTABLE))
    run = _build("fit", "--recipe", recipe)
    assert run.returncode == 19, (run.stdout, run.stderr)
    assert len(run.stderr.splitlines()) == 1 and "no setting passes: the drafter's 6,944" in run.stderr


def test_kept_keys_stay_at_the_recipes_values():
    """--keep: the choices a user will not trade are never suggested away, and the search says so."""
    full = search(_inputs(DEFAULT))
    # The full search tries prefix caching off too.
    assert "prefix caching on/off," in full.searched
    kept = search(_inputs(DEFAULT), keep=frozenset({"serving.enable_prefix_caching"}))
    assert kept.ranked and all(c.setting.enable_prefix_caching for c in kept.ranked)
    assert kept.evaluated < full.evaluated and "prefix caching on," in kept.searched
    assert kept.searched.endswith("(kept: serving.enable_prefix_caching)")
    # Every passing setting of the kept search is one the full search found, ranked the same way.
    assert [c.setting for c in kept.ranked] == [c.setting for c in full.ranked if c.setting.enable_prefix_caching]
    both = search(_inputs(DEFAULT), keep=frozenset({"serving.block_size", "serving.drafter_kv_cache_dtype"}))
    assert {(c.setting.block_size, c.setting.drafter_kv_cache_dtype) for c in both.ranked} == {(None, "auto")}
    with pytest.raises(ValueError, match="^keep: 'serving.port' is not one of serving.block_size, "):
        search(_inputs(DEFAULT), keep=frozenset({"serving.port"}))


def test_fit_keep_on_the_command_line():
    run = _build("fit", "--recipe", DEFAULT, "--keep", "serving.enable_prefix_caching", "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["suggestions"] and all(s["setting"]["enable_prefix_caching"] for s in data["suggestions"])
    bad = _build("fit", "--recipe", DEFAULT, "--keep", "serving.port")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1 and "--keep" in bad.stderr


_REPLAN = r"""
import json, sys
from geometry.verdict.gate import judge
from geometry.model.inputs import GeometryInputs
from geometry.oracle.plan import plan_with_vllm
out = []
for data in json.load(sys.stdin):
    inputs = GeometryInputs.from_json(data)
    verdict = judge(plan_with_vllm(inputs), inputs)
    out.append([verdict.passed, list(verdict.reasons)])
print("REPLAN " + json.dumps({"verdicts": out, "vllm": sys.modules["vllm"].__file__}))
"""


@pytest.mark.oracle
def test_every_suggestion_passes_when_vllm_plans_it(tmp_path):
    from overlay_helpers import copy_tree, oracle_python, pristine_dir, run_apply

    site = copy_tree(pristine_dir(), tmp_path / "site")
    done = run_apply("--site-packages", site)
    assert done.returncode == 0, done.stderr
    cases = [
        _inputs(DEFAULT),
        _inputs(GB10, block_size=None),
        _inputs(DEFAULT, drafter_config=misfit_drafter()),
        _inputs(DEFAULT),
    ]
    keep = [frozenset(), frozenset(), frozenset(), frozenset({"serving.enable_prefix_caching"})]
    suggested = [search(inputs, keep=kept) for inputs, kept in zip(cases, keep)]
    data = [
        inputs.replace(
            block_size=c.setting.block_size,
            drafter_kv_cache_dtype=c.setting.drafter_kv_cache_dtype,
            enable_prefix_caching=c.setting.enable_prefix_caching,
            mamba_cache_mode="align" if c.setting.enable_prefix_caching else "none",
            num_speculative_tokens=c.setting.num_speculative_tokens,
        ).to_json()
        for inputs, result in zip(cases, suggested)
        for c in result.ranked[:3]
    ]
    assert len(data) >= 10
    env = dict(
        os.environ,
        VLLM_TARGET_DEVICE="cpu",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join([str(site), str(REPO)]),
    )
    run = subprocess.run(
        [oracle_python(), "-c", _REPLAN],
        input=json.dumps(data),
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("REPLAN "))[7:])
    assert out["vllm"].startswith(str(site)), out["vllm"]
    for case, (passed, reasons) in zip(data, out["verdicts"]):
        assert passed, (case["block_size"], case["drafter_kv_cache_dtype"], reasons)


# --- ranking as a user would ----------------------------------------------------------
# By hand from the default recipe's configs (tests/default_recipe_figures.py): the target's MLA
# latent page holds 4,718,592 B / 9,216 tokens = 512 B per token; the drafter's KV is 4,096 B per
# token in bf16 ("auto"), 2,048 in fp8. Under the overlay the drafter's page equals the target's,
# so at target block B the drafter block is B x 512 / (drafter B/token), and prefix-cache hits land
# on the finer of the two blocks (the hash block, gcd of the cacheable groups' blocks).
TARGET_BYTES_PER_TOKEN = F.OVERLAY.mla_page // F.OVERLAY.target_block
DRAFTER_FP8_BYTES_PER_TOKEN = F.DRAFTER_BYTES_PER_TOKEN // 2


def _measures(c) -> tuple:
    """What the output shows, larger is better, written out here apart from geometry/verdict/fit.py."""
    hits = -c.hit_alignment_tokens if c.hit_alignment_tokens is not None else float("-inf")
    return (c.requests_at_max_model_len, c.kv_tokens, hits, c.setting.drafter_kv_cache_dtype != "fp8", -len(c.changes))


def _dominated(a, b) -> bool:
    return all(y >= x for x, y in zip(_measures(a), _measures(b))) and _measures(a) != _measures(b)


def test_fit_keeps_prefix_caching_by_default_and_shows_the_hit_alignment():
    run = _build("fit", "--recipe", DEFAULT, "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["recipe"]["hit_alignment_tokens"] == F.PREFIX_ON.hits_every_overlay  # 1,152
    first = data["suggestions"][0]
    assert first["setting"]["enable_prefix_caching"] is True
    assert not any(key == "serving.enable_prefix_caching" for key, _old, _new in first["changes"])
    # Every suggestion keeps hits, each on its drafter block (worked out above from its own block).
    for s in data["suggestions"]:
        per_token = DRAFTER_FP8_BYTES_PER_TOKEN if s["setting"]["drafter_kv_cache_dtype"] == "fp8" else 4_096
        drafter_block = s["block_size"] * TARGET_BYTES_PER_TOKEN // per_token
        assert s["hit_alignment_tokens"] == drafter_block, s
    # It ranks above the recipe's setting: more requests of 1M at once, or as many and more KV capacity.
    own = data["recipe"]
    assert (first["requests_at_max_model_len"], first["kv_tokens"]) > (
        own["requests_at_max_model_len"],
        own["kv_tokens"],
    )
    text = _build("fit", "--recipe", DEFAULT).stdout
    assert "(kept: serving.enable_prefix_caching)" in text
    one = next(line for line in text.splitlines() if line.startswith("#1 "))
    assert "prefix-cache hits every " in one and "no prefix-cache hits" not in one
    assert "can lower acceptance" in text  # the fp8 suggestions say what fp8 may cost


def test_fit_allow_opens_prefix_caching_and_drops_what_is_dominated():
    full = search(_inputs(DEFAULT))
    # Opened: prefix caching off is tried; a setting without hits is shown only where it holds more requests
    # of 1M at once than the same block and drafter KV with hits (no hits is worse on that measure, and on
    # capacity, precision and the lines to change it does no better).
    assert "prefix caching on/off," in full.searched
    on = {
        (c.setting.block_size, c.setting.drafter_kv_cache_dtype): c
        for c in full.ranked
        if c.setting.enable_prefix_caching
    }
    for c in full.ranked:
        same = on.get((c.setting.block_size, c.setting.drafter_kv_cache_dtype))
        if not c.setting.enable_prefix_caching and same is not None:
            assert c.requests_at_max_model_len > same.requests_at_max_model_len, c.setting
    for a in full.ranked:
        assert not any(_dominated(a, b) for b in full.ranked), a.setting
    # The setting the issue found at #3: block 9,728, fp8, prefix caching off: the same requests and
    # capacity as the same block and dtype with prefix caching on, no hits, one more line to change. Gone.
    shown = {
        (c.setting.block_size, c.setting.drafter_kv_cache_dtype, c.setting.enable_prefix_caching) for c in full.ranked
    }
    assert (9_728, "fp8", True) in shown and (9_728, "fp8", False) not in shown
    run = _build("fit", "--recipe", DEFAULT, "--allow", "serving.enable_prefix_caching", "--json")
    assert run.returncode == 0, run.stderr
    assert "kept" not in json.loads(run.stdout)["searched"]


def test_a_key_both_kept_and_allowed_is_refused():
    run = _build("fit", "--recipe", DEFAULT, "--keep", "serving.block_size", "--allow", "serving.block_size")
    assert run.returncode == 2, run.stderr
    assert run.stderr.splitlines() == ["error: --keep and --allow both name serving.block_size: hold it or open it"]


def test_dominance_by_hand():
    from geometry.verdict.fit import Candidate, Setting

    def cand(block, dtype, prefix, requests, kv, hits, changes):
        changes = tuple(("k", None, i) for i in range(changes))
        return Candidate(Setting(block, dtype, prefix, 7), True, block, requests, kv, changes, None, hits)

    on = cand(9_728, "fp8", True, 17, 100, 2_432, 2)
    off = cand(9_728, "fp8", False, 17, 100, None, 3)
    recipe = cand(9_216, "auto", True, 15, 90, 1_152, 0)
    bigger = cand(10_368, "fp8", False, 17, 101, None, 3)
    assert off.dominated_by(on) and not on.dominated_by(off)
    assert not recipe.dominated_by(on)  # finer hits, the model's precision, nothing to change
    assert not bigger.dominated_by(on) and not on.dominated_by(bigger)  # more capacity against hits
    assert not on.dominated_by(on)  # equal is not worse
