"""The one ServeTarget a serving command builds: the recipe, its image (given, or resolved once), and this
machine's values."""

from __future__ import annotations

import dataclasses

import pytest
from compose_support import DIGEST, NO_REPORT
from support.repo import REPO

from stackbuild.core.recipe import load_recipe
from stackbuild.serve.image_pin import ImagePin, resolve_image
from stackbuild.serve.target import ServeTarget, serve_target

RECIPE = load_recipe(REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml")


def test_the_image_is_resolved_as_image_pin_resolves_it():
    target = serve_target(RECIPE, owner="acme", digest=DIGEST, report_path=NO_REPORT)
    assert target.image == resolve_image(RECIPE, owner="acme", digest=DIGEST, report_path=NO_REPORT)
    assert (target.recipe, target.models_dir, target.port, target.gpus) == (RECIPE, None, None, None)


def test_an_image_given_is_taken_as_it_is():
    pin = ImagePin("ghcr.io/o/x", "t", None, "")
    assert serve_target(RECIPE, image=pin, digest="not a digest").image is pin


def test_the_machine_values_are_the_flags_given():
    pin = ImagePin("ghcr.io/o/x", "t", None, "")
    assert ServeTarget(RECIPE, pin).machine_values == ()
    assert ServeTarget(RECIPE, pin, models_dir="/srv", gpus="0").machine_values == ("--models-dir", "--gpus")
    assert ServeTarget(RECIPE, pin, port=8001).machine_values == ("--port",)


def test_a_target_is_a_value():
    target = ServeTarget(RECIPE, ImagePin("ghcr.io/o/x", "t", None, ""))
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.port = 1  # type: ignore[misc]
