"""Two builds from clean state with the same inputs give the same overlay layers,
with and without an oracle record among those inputs, and on a base that ships the
caches vLLM, Triton and torch inductor write (the build leaves them as they are)."""

from __future__ import annotations

import os
import re
import subprocess

import docker
import pytest
from stack_e2e import SOURCE_DATE_EPOCH, cli, recipe_copy, unique_repository

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.recipe import load_recipe
from stackbuild.image import connect as engine_mod
from stackbuild.image.engine import engine_of
from stackbuild.image.plan import make_plan
from stackbuild.image.platform_build import build_image
from stackbuild.image.progress import Progress

pytestmark = [pytest.mark.docker]


def _overlay_layers(client, image_id: str, base_id: str) -> list[str]:
    layers = client.images.get(image_id).attrs["RootFS"]["Layers"]
    base_layers = client.images.get(base_id).attrs["RootFS"]["Layers"]
    assert layers[: len(base_layers)] == base_layers
    return layers[len(base_layers) :]


# What must differ between two builds with the classic builder: the image and parent ids
# and the times it records, the build containers' ids, and where the engine keeps layers; in the
# containerd image store also the manifest's descriptor (the manifest names the config, which holds the times).
MUST_DIFFER = (
    "Id",
    "Parent",
    "Created",
    "Container",
    "GraphDriver",
    "RepoTags",
    "RepoDigests",
    "Metadata",
    "Descriptor",
)
MUST_DIFFER_IN = {"ContainerConfig": ("Hostname", "Image"), "Config": ("Image",)}
# The containerd image store's ``Size`` counts what the engine keeps for the image (its
# compressed blobs beside the unpacked snapshots), which varies by a few bytes between
# builds of the same layers; the classic store's is the sum of the layers' sizes.
MUST_DIFFER_IN_CONTAINERD_STORE = ("Size",)


def _containerd_store(client) -> bool:
    return engine_of(client.version(), client.info(), "").image_store == "containerd"


def _comparable(client, image_id: str) -> dict:
    """The image's inspect document and history without what must differ."""
    skip = MUST_DIFFER + (MUST_DIFFER_IN_CONTAINERD_STORE if _containerd_store(client) else ())
    attrs = {k: v for k, v in client.api.inspect_image(image_id).items() if k not in skip}
    for section, keys in MUST_DIFFER_IN.items():
        attrs[section] = {k: v for k, v in (attrs.get(section) or {}).items() if k not in keys}
    attrs["History"] = [(h["CreatedBy"], h["Size"]) for h in client.api.history(image_id)]
    return attrs


def _remove(client, image_id: str) -> None:
    # Both builds run every step (nocache); the result goes once compared. Never forced: the tests
    # running beside this one on other workers may hold an image or a layer of the same steps.
    try:
        client.api.remove_image(image_id, force=False, noprune=False)
    except docker.errors.APIError:
        pass


def _two_clean_builds(docker_engine, base_pinned: str, plan, check=None) -> None:
    engine = engine_mod.connect()
    quiet = Progress(json_lines=True, stream=open(os.devnull, "w"))
    base_id = docker_engine.images.get(base_pinned).id

    # nocache: other tests may have built the same steps; both builds must run every step.
    first = build_image(engine, plan, quiet, nocache=True)
    first_layers = _overlay_layers(docker_engine, first, base_id)
    first_config = _comparable(docker_engine, first)
    if check is not None:
        check(first)
    _remove(docker_engine, first)

    second = build_image(engine, plan, quiet, nocache=True)
    second_layers = _overlay_layers(docker_engine, second, base_id)
    second_config = _comparable(docker_engine, second)
    _remove(docker_engine, second)

    # At least the payload copy, the patch step and the gate step.
    assert len(first_layers) >= 3
    assert first_layers == second_layers
    assert first_config == second_config


def test_two_clean_builds_give_identical_overlay_layers(on_engine, synthetic_base_amd64, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    base = synthetic_base_amd64
    recipe = load_recipe(recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest))
    plan = make_plan(recipe, repository="repro.test/glm53")
    assert plan.oracle_record is None
    _two_clean_builds(on_engine.client, base.pinned, plan)


def test_two_clean_builds_with_an_oracle_record_give_identical_overlay_layers(
    amd64_build, docker_engine, synthetic_base_amd64, tmp_path, monkeypatch
):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    base = synthetic_base_amd64
    path = recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    run = cli("record", "--recipe", str(path), "--image", f"{amd64_build.repository}:{amd64_build.report['tags'][-1]}")
    assert run.returncode == 0, run.stderr
    plan = make_plan(load_recipe(path), repository="repro.test/glm53")
    assert plan.oracle_record == path.with_name("recipe.oracle.json")
    _two_clean_builds(docker_engine, base.pinned, plan)


# Cache directories of vLLM, Triton and torch inductor as a base may ship them, each with a file.
BASE_CACHES = ("/root/.cache/vllm", "/root/.triton/cache", "/tmp/torchinductor_root")
CACHE_BASE_DOCKERFILE = """FROM {base}
RUN for d in {caches}; do mkdir -p "$d" && echo shipped > "$d/from-the-base"; done
"""


@pytest.fixture
def base_with_caches(docker_engine, registry, synthetic_base_amd64, tmp_path):
    """The synthetic amd64 base plus the three cache directories, pushed to the local registry."""
    repository = unique_repository(registry.address, "base-with-caches")
    reference = f"{repository}:{synthetic_base_amd64.tag}"
    context = tmp_path / "base-with-caches"
    context.mkdir()
    (context / "Dockerfile").write_text(
        CACHE_BASE_DOCKERFILE.format(base=synthetic_base_amd64.pinned, caches=" ".join(BASE_CACHES))
    )
    env = {**registry.env, "DOCKER_BUILDKIT": "0"}
    build = subprocess.run(
        ["docker", "build", "-q", "-t", reference, str(context)], env=env, capture_output=True, text=True
    )
    assert build.returncode == 0, build.stderr
    push = subprocess.run(["docker", "push", reference], env=env, capture_output=True, text=True)
    assert push.returncode == 0, push.stderr
    digest = re.search(r"digest: (sha256:[0-9a-f]{64})", push.stdout).group(1)
    return repository, digest


def _paths(docker_engine, image: str, *roots: str) -> dict[str, str]:
    """Every path under ``roots`` in ``image`` (one filesystem), with its type, size and mtime.

    Through the CLI, attached before the container starts: the whole output, where reading
    the container's log afterwards lost its start under load."""
    run = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "find", image, *roots, "-xdev", "-printf", r"%p\t%y %s %T@\n"],
        capture_output=True,
        check=True,
        timeout=600,
    )
    return dict(line.split("\t", 1) for line in run.stdout.decode().splitlines())


def test_a_base_with_caches_keeps_them_and_builds_reproducibly(docker_engine, base_with_caches, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    repository, digest = base_with_caches
    base = f"{repository}@{digest}"
    base_paths = _paths(docker_engine, base, "/")
    base_caches = {p: v for p, v in base_paths.items() if p.startswith(BASE_CACHES)}
    assert {p for p in base_caches if p.endswith("/from-the-base")} == {f"{c}/from-the-base" for c in BASE_CACHES}

    def nothing_of_the_base_deleted(image_id: str) -> None:
        paths = _paths(docker_engine, image_id, "/")
        assert sorted(set(base_paths) - set(paths)) == []
        # The caches are the base's, unchanged: the build steps wrote none of theirs there.
        assert {p: v for p, v in paths.items() if p.startswith(BASE_CACHES)} == base_caches
        assert not [p for p in paths if p.startswith("/tmp/.glm53-step")]

    recipe = load_recipe(
        recipe_copy(tmp_path, "b200-amd64", base=repository, tag=f"v{DEFAULT_VERSION}-amd64", digest=digest)
    )
    plan = make_plan(recipe, repository="repro.test/glm53")
    assert plan.oracle_record is None
    _two_clean_builds(docker_engine, base, plan, check=nothing_of_the_base_deleted)
