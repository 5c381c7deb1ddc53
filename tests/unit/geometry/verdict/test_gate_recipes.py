"""Every recipe under recipes/: its KV-geometry gate runs on the host through
build.py at the recipe's TP (per rank, with the per-node picture), and render
and build --dry-run work, before any engine is asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.repo import REPO

from stackbuild.core.recipe import load_recipe

RECIPES = sorted((REPO / "recipes").glob("*/recipe.yaml"))
GB10 = REPO / "recipes" / "glm53-flash-dflash2-2x-gb10" / "recipe.yaml"
# A daemon address where nothing listens: none of these commands may need one.
DEAD_DOCKER = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def build_py(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), *args],
        cwd=REPO,
        env=DEAD_DOCKER,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_recipes_are_found():
    assert GB10 in RECIPES and len(RECIPES) >= 2


@pytest.mark.parametrize("path", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_recipe_gates_renders_and_plans(path):
    recipe = load_recipe(path)
    s = recipe.serving
    geo = build_py("geometry", "--json", "--recipe", str(path))
    assert geo.returncode == 0, geo.stderr
    data = json.loads(geo.stdout)
    report = data["report"]
    assert data["verdict"]["passed"]
    assert (report["tensor_parallel_size"], report["nodes"], report["ranks_per_node"]) == (
        s.tensor_parallel_size,
        s.nodes,
        s.tensor_parallel_size // s.nodes,
    )
    assert report["capability_family"] == recipe.hardware.capability_family
    assert report["kv_cache_memory_bytes"] == int(recipe.geometry.kv_cache_memory_gib * (1 << 30))
    render = build_py("render", "--allow-unpinned", "--recipe", str(path))
    assert render.returncode == 0, render.stderr
    assert render.stdout.startswith(f"# {recipe.name}:")
    dry = build_py("build", "--dry-run", "--json", "--allow-unpinned", "--recipe", str(path))
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert (plan["geometry_verdict"], plan["platform"]) == ("pass", recipe.platform)


def test_gb10_gate_is_per_rank_with_the_node_picture():
    """TP2 over two GB10 nodes: one rank per node, each holding half the KDA
    state and half the drafter's KV heads; the table says so."""
    geo = build_py("geometry", "--recipe", str(GB10))
    assert geo.returncode == 0, geo.stderr
    assert "GPU family 120, TP 2," in geo.stdout
    assert "nodes: 2 x 1 rank (TP 2); KV per node 40.00 GiB, 80.00 GiB in all" in geo.stdout
    report = json.loads(build_py("geometry", "--json", "--recipe", str(GB10)).stdout)["report"]
    rows = report["with_drafter"]["layers"]
    kda = {r["real_page_bytes"] for r in rows if r["role"] == "kda"}
    # conv (3 x 64 heads x 128 / 2 ranks) x (kernel 4 - 1 + 7 speculative) x bf16
    # + recurrent (64 / 2) x 128 x 128 x fp32
    assert kda == {3 * 64 * 128 // 2 * 10 * 2 + 64 // 2 * 128 * 128 * 4}
    assert {r["num_kv_heads"] for r in rows if r["owner"] == "drafter"} == {8 // 2}
    assert report["target_kv_dtype"] == "fp8_ds_mla"
    # the recipe's block; the drafter's exact fit is P / 2048 B per token: on vLLM 0.34.0 the SM120
    # fp8_ds_mla row of a RoPE-free latent is 528 B, so 6144 x 528 / 2048 = 6144 x 33 / 128, a multiple of 16
    assert report["with_drafter"]["block_size"] == 6144
    assert {r["block_size"] for r in rows if r["owner"] == "drafter"} == {6144 * 33 // 128}
