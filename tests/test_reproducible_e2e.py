"""Two builds from clean state with the same inputs give the same overlay layers,
with and without an oracle record among those inputs."""
from __future__ import annotations

import os

import pytest

from stack_e2e import SOURCE_DATE_EPOCH, cli, recipe_copy
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


# What must differ between two builds with the classic builder: the image and parent ids
# and the times it records, the build containers' ids, and where the engine keeps layers.
MUST_DIFFER = ("Id", "Parent", "Created", "Container", "GraphDriver", "RepoTags", "RepoDigests", "Metadata")
MUST_DIFFER_IN = {"ContainerConfig": ("Hostname", "Image"), "Config": ("Image",)}


def _comparable(client, image_id: str) -> dict:
    """The image's inspect document and history without what must differ."""
    attrs = {k: v for k, v in client.api.inspect_image(image_id).items() if k not in MUST_DIFFER}
    for section, keys in MUST_DIFFER_IN.items():
        attrs[section] = {k: v for k, v in (attrs.get(section) or {}).items() if k not in keys}
    attrs["History"] = [(h["CreatedBy"], h["Size"]) for h in client.api.history(image_id)]
    return attrs


def _remove(client, image_id: str) -> None:
    # The classic builder's cache is its intermediate images: removing the result
    # (and its untagged parents) leaves nothing to reuse.
    client.api.remove_image(image_id, force=True, noprune=False)


def _two_clean_builds(docker_engine, base, plan) -> None:
    engine = engine_mod.connect()
    quiet = Progress(json_lines=True, stream=open(os.devnull, "w"))
    base_id = docker_engine.images.get(f"{base.image}@{base.digest}").id

    # nocache: other tests may have built the same steps; both builds must run every step.
    first = build_image(engine, plan, quiet, nocache=True)
    first_layers = _overlay_layers(docker_engine, first, base_id)
    first_config = _comparable(docker_engine, first)
    _remove(docker_engine, first)

    second = build_image(engine, plan, quiet, nocache=True)
    second_layers = _overlay_layers(docker_engine, second, base_id)
    second_config = _comparable(docker_engine, second)
    _remove(docker_engine, second)

    # At least the payload copy, the patch step and the gate step.
    assert len(first_layers) >= 3
    assert first_layers == second_layers
    assert first_config == second_config


def test_two_clean_builds_give_identical_overlay_layers(docker_engine, synthetic_base_amd64, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    base = synthetic_base_amd64
    recipe = load_recipe(recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest))
    plan = make_plan(recipe, repository="repro.test/glm53")
    assert plan.oracle_record is None
    _two_clean_builds(docker_engine, base, plan)


def test_two_clean_builds_with_an_oracle_record_give_identical_overlay_layers(amd64_build, docker_engine, synthetic_base_amd64,
                                                                             tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    base = synthetic_base_amd64
    path = recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    run = cli("record", "--recipe", str(path), "--image", f"{amd64_build.repository}:{amd64_build.report['tags'][-1]}")
    assert run.returncode == 0, run.stderr
    plan = make_plan(load_recipe(path), repository="repro.test/glm53")
    assert plan.oracle_record == path.with_name("recipe.oracle.json")
    _two_clean_builds(docker_engine, base, plan)
