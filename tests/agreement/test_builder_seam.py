"""vLLM 0.34.0's ``KVCacheConfigBuilder`` seam, tried on its own code on the CPU (docs/overlay.md, "The
KVCacheConfigBuilder seam"): a builder alone (tests/support/builder_seam.py, installed through the platform
hook) gives the drafter's layers the exact-fit block in the plan, the KV views and the hash block size,
as the series does and the gate predicts; the engine core still lowers the global block size to the
drafter's block, which patch 0002 exists to stop. So the builder cannot replace the series.

The pristine tree is the release's wheel (``make pristine-all``); the patched tree is a copy with
``overlay/series/vllm-0.34.0`` applied by the strict applier. Each run is a subprocess whose ``sys.path``
starts with the tree, beside the venv's torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from infra.fixtures import in_ci
from overlay_helpers import OVERLAY, copy_tree, run_apply
from support.repo import REPO

from geometry.image_contract import Behaviour
from geometry.model.inputs import GeometryInputs
from geometry.plan.simulate import simulate

pytestmark = pytest.mark.oracle

VERSION = "0.34.0"
SERIES = OVERLAY / "series" / f"vllm-{VERSION}"


@pytest.fixture(scope="module")
def pristine() -> Path:
    tree = Path(os.environ.get("OVERLAY_CACHE", REPO / ".cache")) / f"vllm-{VERSION}"
    if not (tree / "vllm").is_dir():
        message = f"no pristine vLLM {VERSION} tree at {tree}: run `make pristine-all`"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return tree.resolve()


@pytest.fixture(scope="module")
def patched(pristine, tmp_path_factory) -> Path:
    site = copy_tree(pristine, tmp_path_factory.mktemp("patched") / "site")
    done = run_apply("--series", SERIES, "--site-packages", site)
    assert done.returncode == 0, done.stderr
    return site


def seam(tree: Path, request: dict) -> dict:
    """``python -m support.builder_seam`` on ``tree``: its ``BUILDER_SEAM`` answer."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(REPO), str(REPO / "tests")]))
    proc = subprocess.run(
        [sys.executable, "-m", "support.builder_seam", json.dumps(request)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("BUILDER_SEAM ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    answer = json.loads(lines[-1].split(" ", 1)[1])
    for part in ("recipe", "engine_core"):
        if part in answer:  # the tree under test, not the venv's release
            assert answer[part]["vllm_file"].startswith(str(tree)), answer[part]["vllm_file"]
    return answer


def recipe_input() -> dict:
    """The default recipe's gate input, on 0.34.0."""
    from stackbuild.core.gate import gate_input
    from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

    return dict(
        gate_input(load_recipe(DEFAULT_RECIPE), vllm_behaviour=Behaviour.OVERLAY).to_json(), vllm_version=VERSION
    )


def predicted(behaviour: Behaviour):
    """The gate's with-drafter plan of the default recipe on 0.34.0."""
    return simulate(GeometryInputs.from_json(dict(recipe_input(), vllm_behaviour=behaviour.value))).with_drafter


def group_rows(plan) -> list:
    return [(tuple(g.layer_names), g.block_size, g.bytes) for g in plan.groups]


def seam_rows(answer: dict) -> list:
    return [(tuple(g["layers"]), g["block_size"], g["bytes"]) for g in answer["groups"]]


@pytest.fixture(scope="module")
def with_builder(pristine) -> dict:
    return seam(
        pristine,
        {"inputs": recipe_input(), "builder": True, "engine_core": {"mamba_cache_mode": "align"}, "platform": True},
    )


def test_cuda_platform_answers_the_default_builder(with_builder):
    """CudaPlatform keeps Platform's hook, which names DefaultKVCacheConfigBuilder: on CUDA no variable or
    config names another builder; a platform that overrides the hook is the only way in."""
    assert with_builder["cuda"] == {
        "overrides_hook": False,
        "builder": "vllm.v1.core.kv_cache_planning.DefaultKVCacheConfigBuilder",
    }


def test_planning_takes_the_builders_groups_as_the_series_plans_them(with_builder, pristine):
    """Core's checks accept the builder's groups (the draft group's spec re-sized, the layers the runner
    reported at the target's block), and the plan is the gate's patched prediction; without the builder
    the same run is the stock prediction."""
    plan = with_builder["recipe"]
    overlay = predicted(Behaviour.OVERLAY)
    draft = [g for g in overlay.groups if g.is_draft]
    assert set(plan["runner_draft_blocks"].values()) == {overlay.block_size}  # the runner's, stock
    assert seam_rows(plan) == group_rows(overlay)
    assert (plan["bytes_per_block"], plan["num_blocks"]) == (overlay.bytes_per_block, overlay.num_blocks)
    assert draft and all(g.block_size < overlay.block_size for g in draft)
    stock = seam(pristine, {"inputs": recipe_input(), "builder": False})["recipe"]
    assert seam_rows(stock) == group_rows(predicted(Behaviour.STOCK)) != seam_rows(plan)


def test_the_builders_plan_is_the_patched_trees(with_builder, patched):
    """The series on its tree, no builder: the same groups, blocks and KV views; only the block the
    runner reports for the draft layers differs (fitted there, the target's here)."""
    plan = with_builder["recipe"]
    series = seam(patched, {"inputs": recipe_input(), "builder": False})["recipe"]
    same = ("groups", "bytes_per_block", "num_blocks", "draft_view_shapes", "target_page")
    assert {k: series[k] for k in same} == {k: plan[k] for k in same}
    (draft_block,) = {g["block_size"] for g in series["groups"] if "drafter." in g["layers"][0]}
    assert set(series["runner_draft_blocks"].values()) == {draft_block}
    assert set(plan["runner_draft_blocks"].values()) != {draft_block}


def test_the_runners_kv_views_take_the_groups_block(with_builder):
    """allocate_kv_cache views each draft layer with its group's block (the token axis of the
    block-outermost view), not the block of the spec the runner reported."""
    plan = with_builder["recipe"]
    (draft_block,) = {g.block_size for g in predicted(Behaviour.OVERLAY).groups if g.is_draft}
    for name, shape in plan["draft_view_shapes"].items():
        assert shape[0] == 1 and draft_block in shape[1:], (name, shape)
        assert plan["runner_draft_blocks"][name] not in shape, (name, shape)


def test_the_engine_core_lowers_the_global_block_size(with_builder, patched):
    """Everything the engine core plans from the builder's groups is the patched tree's (blocks, groups,
    hash block, cache-hit alignment) except the global block size: stock EngineCore._initialize_kv_caches
    takes the minimum over the prefix-cacheable groups, the drafter's among them, which patch 0002
    changes and no builder can."""
    built = with_builder["engine_core"]
    series = seam(patched, {"builder": False, "engine_core": {"mamba_cache_mode": "align"}})["engine_core"]
    differ = {k for k in built if k != "vllm_file" and built[k] != series[k]}
    assert differ == {"global_block_size"}, differ
    draft_blocks = {g["block_size"] for g in built["groups"] if g["draft"]}
    assert built["global_block_size"] == min(draft_blocks) < series["global_block_size"]
    assert series["global_block_size"] == built["target_block_size"]
