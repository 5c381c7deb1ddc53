"""A multi-platform recipe keeps one oracle record per platform: where each lies, and `build.py record`
refusing, in one line and before asking an engine, to guess which platform's record to copy."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input_helpers import assert_refused, invoke, with_base_digest
from recipe_copies import TEST_DIGEST, copy_recipe
from stack_e2e import recipe_copy

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.recipe import load_recipe
from stackbuild.image.oracle_record import record_path


def sm100_copy(tmp_path: Path) -> Path:
    """The SM100 recipe (linux/amd64 and linux/arm64) copied, its base pinned by a digest of its own."""
    return recipe_copy(
        tmp_path, "glm53-flash-dflash2-sm100", base="vllm/vllm-openai", tag=f"v{DEFAULT_VERSION}", digest=TEST_DIGEST
    )


def recipe_of(kind: str, tmp_path: Path) -> Path:
    return copy_recipe(tmp_path, with_base_digest()) if kind == "one-platform" else sm100_copy(tmp_path)


def test_a_one_platform_recipe_keeps_recipe_oracle_json(tmp_path):
    recipe = load_recipe(copy_recipe(tmp_path, with_base_digest()))
    assert recipe.platforms == ("linux/arm64",)
    assert record_path(recipe) == tmp_path / "recipe" / "recipe.oracle.json"


def test_a_multi_platform_recipe_keeps_one_record_per_platform(tmp_path):
    recipe = load_recipe(sm100_copy(tmp_path))
    assert recipe.platforms == ("linux/amd64", "linux/arm64")
    paths = [record_path(recipe.for_platform(p)) for p in ("linux/amd64", "linux/arm64")]
    assert paths == [
        recipe.path.parent / "recipe.oracle.linux-amd64.json",
        recipe.path.parent / "recipe.oracle.linux-arm64.json",
    ]


def test_record_of_a_multi_platform_recipe_needs_the_platform(tmp_path):
    recipe = sm100_copy(tmp_path)
    line = assert_refused(invoke(["record", "--recipe", recipe]), 2)
    assert line == (
        f"error: {recipe}: platforms: one oracle record per platform (linux/amd64, linux/arm64): "
        "name the one to copy with --platform"
    )
    assert sorted(p.name for p in recipe.parent.iterdir()) == ["configs", "recipe.yaml"]


@pytest.mark.parametrize("kind", ["one-platform", "multi-platform"])
def test_record_of_a_platform_the_recipe_does_not_build_is_refused(tmp_path, kind):
    recipe = recipe_of(kind, tmp_path)
    line = assert_refused(invoke(["record", "--recipe", recipe, "--platform", "linux/s390x"]), 2)
    assert "--platform linux/s390x is not one of the recipe's" in line, line
    assert sorted(p.name for p in recipe.parent.iterdir()) == ["configs", "recipe.yaml"]
