"""A compose file's one service from a ServeTarget: the port, the models directory and the GPUs it gives."""

from __future__ import annotations

import os

import pytest
from support.repo import REPO

from stackbuild.core.errors import ComposeOverrideError
from stackbuild.core.recipe import load_recipe
from stackbuild.serve.compose_service import (
    BASELINE_SERVICE,
    SERVICE,
    service_document,
    single_node_service,
)
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.target import ServeTarget

RECIPE = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml")
PIN = ImagePin("ghcr.io/o/x", "t", None, "")


def test_the_published_port_is_the_targets_or_the_recipes():
    port = RECIPE.serving.port
    assert single_node_service(ServeTarget(RECIPE, PIN)).published_port == port
    assert single_node_service(ServeTarget(RECIPE, PIN, port=18000)).published_port == 18000
    baseline = single_node_service(ServeTarget(RECIPE, PIN), baseline=True)
    assert (baseline.name, baseline.published_port) == (BASELINE_SERVICE, port + 1)
    with pytest.raises(ComposeOverrideError, match="^--port: "):
        single_node_service(ServeTarget(RECIPE, PIN, port=70000))


def test_the_document_mounts_the_targets_models_and_reserves_its_gpus(tmp_path):
    target = ServeTarget(RECIPE, PIN, models_dir=str(tmp_path / "m"), gpus="0")
    spec = service_document(target, single_node_service(target))["services"][SERVICE]
    assert spec["volumes"][0]["source"] == os.path.abspath(tmp_path / "m")
    assert spec["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0"]
    plain = service_document(ServeTarget(RECIPE, PIN), single_node_service(ServeTarget(RECIPE, PIN)))
    assert plain["services"][SERVICE]["volumes"][0]["source"] == RECIPE.model_mount_point
