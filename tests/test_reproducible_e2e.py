"""Two builds from clean state with the same inputs give the same overlay layers."""
from __future__ import annotations

import os

import pytest

from stack_e2e import SOURCE_DATE_EPOCH, recipe_copy
from stackbuild import engine as engine_mod
from stackbuild.pipeline import build_image
from stackbuild.plan import make_plan
from stackbuild.progress import Progress
from stackbuild.recipe import load_recipe

pytestmark = [pytest.mark.docker]


def _overlay_layers(client, image_id: str, base_id: str) -> list[str]:
    layers = client.images.get(image_id).attrs["RootFS"]["Layers"]
    base_layers = client.images.get(base_id).attrs["RootFS"]["Layers"]
    assert layers[: len(base_layers)] == base_layers
    return layers[len(base_layers):]


def _remove(client, image_id: str) -> None:
    # The classic builder's cache is its intermediate images: removing the result
    # (and its untagged parents) leaves nothing to reuse.
    client.api.remove_image(image_id, force=True, noprune=False)


def test_two_clean_builds_give_identical_overlay_layers(docker_engine, synthetic_base_amd64, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    base = synthetic_base_amd64
    recipe = load_recipe(recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest))
    plan = make_plan(recipe, repository="repro.test/glm53")
    engine = engine_mod.connect()
    quiet = Progress(json_lines=True, stream=open(os.devnull, "w"))
    base_id = docker_engine.images.get(f"{base.image}@{base.digest}").id

    first = build_image(engine, plan, quiet)
    first_layers = _overlay_layers(docker_engine, first, base_id)
    first_config = docker_engine.images.get(first).attrs["Config"]
    _remove(docker_engine, first)

    second = build_image(engine, plan, quiet)
    second_layers = _overlay_layers(docker_engine, second, base_id)
    second_config = docker_engine.images.get(second).attrs["Config"]
    _remove(docker_engine, second)

    # At least the payload copy, the patch step and the gate step.
    assert len(first_layers) >= 3
    assert first_layers == second_layers
    assert first_config["Labels"] == second_config["Labels"]
    assert first_config["Env"] == second_config["Env"]
