"""`build.py lock` of a base pushed as a single OCI image manifest, as Docker's containerd image store pushes
an image built on it: the engine's distribution inspect names no platform for such a manifest (Docker 20.10
and 28.5 alike), so the lock reads the platform from the image's config in the registry, on both engines.

The base is built and pushed by the second engine, and only from its own unit of tests (tests/engines.py:
the ids carry engine28, so one worker drives that engine); each test then locks it through both engines."""

from __future__ import annotations

import json
import subprocess

import pytest
from engines import ENGINE28
from stack_e2e import cli, docker_login, recipe_copy, registry_manifest, unique_repository

pytestmark = [pytest.mark.docker, pytest.mark.registry]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@pytest.fixture(scope="module")
def oci_base(target_engine, registry, synthetic_base_amd64, tmp_path_factory) -> tuple[str, str, str]:
    """(repository, tag, manifest digest): the synthetic amd64 base plus a label, built and pushed by the
    second engine (containerd image store)."""
    assert target_engine.name == ENGINE28
    host = target_engine.host
    tmp = tmp_path_factory.mktemp("oci-base")
    config = docker_login(tmp, registry)
    repository, tag = unique_repository(registry.address, "oci-base"), synthetic_base_amd64.tag
    env = {**registry.env, "DOCKER_HOST": host, "DOCKER_CONFIG": str(config)}
    dockerfile = f"FROM {synthetic_base_amd64.pinned}\nLABEL org.glm53.test.oci-base=1\n"
    for command, stdin in (
        (["build", "-q", "-t", f"{repository}:{tag}", "-"], dockerfile),
        (["push", f"{repository}:{tag}"], None),
    ):
        run = subprocess.run(["docker", *command], input=stdin, capture_output=True, text=True, timeout=900, env=env)
        assert run.returncode == 0, f"docker {' '.join(command)} on {host}: {run.stderr}"
    digest, manifest = registry_manifest(registry, repository, tag)
    assert manifest["mediaType"] == OCI_MANIFEST, manifest  # what the test is about: not an index, not Docker v2
    return repository, tag, digest


SECOND_ENGINE_ONLY = pytest.mark.parametrize("target_engine", [ENGINE28], indirect=True)
# Each lock goes through the first engine (the environment's DOCKER_HOST) and the second.
THROUGH = ("first", "second")


def _env(through: str, engine) -> dict:
    return engine.env({}) if through == "second" else {}


@SECOND_ENGINE_ONLY
@pytest.mark.parametrize("through", THROUGH)
def test_the_lock_pins_a_single_oci_manifest_with_its_configs_platform(
    target_engine, through, registry, oci_base, tmp_path
):
    repository, tag, digest = oci_base
    config = docker_login(tmp_path, registry)
    recipe = recipe_copy(tmp_path, "b200-amd64", base=repository, tag=tag)
    run = cli("lock", "--recipe", str(recipe), "--json", docker_config_dir=config, env=_env(through, target_engine))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["digest"] == digest
    lock = json.loads((recipe.parent / "recipe.lock.json").read_text())
    assert lock["base"]["digest"] == digest and lock["base"]["platform"] == "linux/amd64"
    assert lock["base"]["platforms_offered"] == ["linux/amd64"]  # read from the config: the engine names none


@SECOND_ENGINE_ONLY
@pytest.mark.parametrize("through", THROUGH)
def test_a_platform_the_manifest_does_not_hold_is_one_line(target_engine, through, registry, oci_base, tmp_path):
    repository, tag, _digest = oci_base
    config = docker_login(tmp_path, registry)
    recipe = recipe_copy(tmp_path, "glm53-flash-dflash2-sm100", base=repository, tag=tag)  # amd64 and arm64
    run = cli("lock", "--recipe", str(recipe), docker_config_dir=config, env=_env(through, target_engine))
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip().splitlines() == [
        f"error: {repository}:{tag}: the registry offers linux/amd64, not linux/arm64"
    ], run.stderr
    assert not (recipe.parent / "recipe.lock.json").exists()
