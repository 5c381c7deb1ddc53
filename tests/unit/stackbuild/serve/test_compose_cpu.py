"""The CPU test recipe (tests/recipes/cpu-tiny): ngram speculation without a drafter, a host
without a GPU (hardware.gpu: none), and the compose file `build.py compose` writes for it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from compose_support import NO_REPORT
from support.repo import REPO
from tiny_model import write_tiny_model

from geometry.verdict.table import render_text
from stackbuild.core.errors import ComposeOverrideError, RecipeError
from stackbuild.core.gate import recipe_geometry
from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import serve_argv
from stackbuild.serve.compose import compose_document, render_compose
from stackbuild.serve.compose_service import SERVICE
from stackbuild.serve.image_pin import resolve_image

CPU_RECIPE = REPO / "tests" / "recipes" / "cpu-tiny" / "recipe.yaml"


def cpu_copy(tmp_path: Path, edit) -> Path:
    """The CPU recipe copied to ``tmp_path`` with ``edit`` applied to its YAML data."""
    target = tmp_path / "cpu-tiny"
    shutil.copytree(CPU_RECIPE.parent, target)
    data = yaml.safe_load((target / "recipe.yaml").read_text())
    edit(data)
    (target / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return target / "recipe.yaml"


def test_the_recipe_loads_without_a_drafter_on_a_host_without_a_gpu(tmp_path):
    r = load_recipe(CPU_RECIPE)
    assert r.drafter is None and r.drafter_config is None and r.speculation.method == "ngram"
    assert not r.hardware.has_gpu and r.hardware.capability_family == 0
    assert r.model_mount_point == "/models"
    # The committed config snapshot is the config.json the tests write for the tiny model.
    model = write_tiny_model(tmp_path / "tiny")
    assert json.loads((model / "config.json").read_text()) == dict(r.target_config)


def test_the_serve_command_asks_vllm_for_prompt_lookup():
    r = load_recipe(CPU_RECIPE)
    argv = serve_argv(r)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {
        "method": "ngram",
        "num_speculative_tokens": r.serving.num_speculative_tokens,
        "prompt_lookup_max": r.speculation.prompt_lookup_max,
        "prompt_lookup_min": r.speculation.prompt_lookup_min,
    }
    assert argv[0] == r.target.path and "--enable-prefix-caching" in argv


def test_the_gate_plans_the_cpu_platform():
    """A dense target on vLLM's CPU platform: 128-token blocks, where prefix-cache hits land."""
    run = recipe_geometry(load_recipe(CPU_RECIPE))
    assert run.verdict.passed, run.verdict.reasons
    assert run.report.model_kind == "qwen3" and run.report.backends == ("CPU_ATTN",)
    assert run.report.with_drafter.prefix_cache.hit_alignment_tokens == 128
    assert "vLLM's CPU platform, TP 1," in render_text(run.report, run.verdict)


def test_the_compose_document_reserves_no_gpu_and_names_no_drafter():
    r = load_recipe(CPU_RECIPE)
    image = resolve_image(r, repository="glm53-test/cpu-tiny-serve", report_path=NO_REPORT)
    svc = compose_document(r, image=image)["services"][SERVICE]
    assert "deploy" not in svc and "ulimits" not in svc
    assert not any(".drafter." in key for key in svc["labels"])
    assert svc["environment"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    text = render_compose(r, repository="glm53-test/cpu-tiny-serve", report_path=NO_REPORT)
    assert "ngram speculation (no drafter) on a host without a GPU" in text
    assert "NVIDIA" not in text and "LICENCE" not in text
    with pytest.raises(ComposeOverrideError, match="^--gpus: .*hardware.gpu: none"):
        compose_document(r, image=image, gpus="0")


def test_compose_writes_a_file_vllm_and_compose_accept(tmp_path):
    out = tmp_path / "cpu-tiny.compose.yaml"
    r = subprocess.run(
        [
            sys.executable,
            str(REPO / "build.py"),
            "compose",
            "--recipe",
            str(CPU_RECIPE),
            "-o",
            str(out),
            "--repository",
            "glm53-test/cpu-tiny-serve",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["checks"]["serve_args"]["status"] in ("ok", "passed"), result["checks"]
    assert yaml.safe_load(out.read_text())["services"][SERVICE]["command"] == result["command"]


@pytest.mark.parametrize(
    "edit, key, why",
    [
        (
            lambda d: d.update(
                drafter={
                    "id": "x/y",
                    "path": "/models/y",
                    "config": "configs/target.config.json",
                    "precision": "bf16",
                    "license": "MIT",
                }
            ),
            "drafter",
            "speculation.method ngram proposes from the prompt: remove the drafter",
        ),
        (
            lambda d: d["speculation"].update(method="dflash"),
            "drafter",
            "required key is missing (speculation.method dflash drafts with this checkpoint)",
        ),
        (
            lambda d: d["speculation"].pop("prompt_lookup_max"),
            "speculation.prompt_lookup_max",
            "required key is missing (speculation.method ngram)",
        ),
        (
            lambda d: d["speculation"].update(prompt_lookup_min=4),
            "speculation.prompt_lookup_min",
            "needs 1 <= prompt_lookup_min <= prompt_lookup_max <= 1024, got 4 and 3",
        ),
        (
            lambda d: d["serving"].update(num_speculative_tokens=0),
            "serving.num_speculative_tokens",
            "must be at least 1 (the tokens ngram proposes per step), got 0",
        ),
        (
            lambda d: d["serving"].update(drafter_kv_cache_dtype="auto"),
            "serving.drafter_kv_cache_dtype",
            "speculation.method ngram has no drafter KV cache",
        ),
        (
            lambda d: d["target"].update(path="/tiny"),
            "target.path",
            "must lie in a models directory such as /models/NAME, got /tiny",
        ),
    ],
    ids=[
        "ngram-with-drafter",
        "dflash-without-drafter",
        "no-lookup-max",
        "min-above-max",
        "no-tokens",
        "drafter-kv-dtype",
        "model-at-root",
    ],
)
def test_speculation_keys_are_checked(tmp_path, edit, key, why):
    path = cpu_copy(tmp_path, edit)
    with pytest.raises(RecipeError) as exc:
        load_recipe(path)
    assert str(exc.value) == f"{path}: {key}: {why}"


def test_the_default_recipe_speculates_with_its_drafter_by_default():
    r = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml")
    assert r.speculation.method == "dflash" and r.drafter is not None and r.hardware.has_gpu


def test_an_image_build_needs_a_drafter():
    r = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "build", "--dry-run", "--allow-unpinned", "--recipe", str(CPU_RECIPE)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "speculation.method: ngram has no drafter checkpoint" in r.stderr, r.stderr
