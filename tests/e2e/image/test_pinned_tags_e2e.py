"""End to end: pinned tags are immutable in the authenticated local registry; `latest` moves.

The `push` tests publish variants of the session's amd64 build (one more
label each: other images of the same recipe) into a repository of their
own; the `build --push` test builds the recipe on the synthetic base.
What the registry holds is read back with plain HTTP requests, not through
the driver's registry code.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from stack_e2e import (
    SOURCE_DATE_EPOCH,
    cli,
    json_events,
    local_tags,
    recipe_copy,
    registry_manifest,
    repository_name,
    tag_locally,
    unique_repository,
    variant_of,
)

pytestmark = [pytest.mark.docker, pytest.mark.registry]

# tests/recipes/b200-amd64 tags: latest and sm{family}-{gpu}-{date}, the date from SOURCE_DATE_EPOCH (2025-11-30).
PINNED = "sm100-b200-20251130"
NEXT_DAY_EPOCH = str(int(SOURCE_DATE_EPOCH) + 86400)
NEXT_DAY_PINNED = "sm100-b200-20251201"


def registry_tags(registry, repository: str) -> list[str]:
    response = requests.get(
        f"http://{registry.address}/v2/{repository_name(repository)}/tags/list",
        auth=(registry.username, registry.password),
        timeout=30,
    )
    if response.status_code == 404:
        return []
    response.raise_for_status()
    return sorted(response.json().get("tags") or [])


def local_image_id(reference: str) -> str:
    return subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", reference], check=True, capture_output=True, text=True
    ).stdout.strip()


def push(
    recipe: Path, repository: str, docker_config: Path, *extra: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    return cli(
        "push", "--recipe", str(recipe), "--repository", repository, *extra, docker_config_dir=docker_config, env=env
    )


def error_lines(run: subprocess.CompletedProcess) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.startswith("error: ")]


@dataclass
class Published:
    recipe: Path
    repository: str
    docker_config: Path
    image_id: str
    digest: str  # the manifest digest the pinned tag points at


@pytest.fixture
def published(registry, amd64_build) -> Published:
    """A variant of the session's build pushed with `build.py push` to a repository of this test
    (latest, pinned tag)."""
    repository = unique_repository(registry.address, "pinned-tags")
    image_id = variant_of(amd64_build.report["image_id"])
    tag_locally(image_id, repository, ["latest", PINNED])
    run = push(amd64_build.recipe, repository, amd64_build.docker_config)
    assert run.returncode == 0, run.stderr
    pinned = registry_manifest(registry, repository, PINNED)
    assert pinned is not None and pinned[1]["config"]["digest"] == image_id
    return Published(amd64_build.recipe, repository, amd64_build.docker_config, image_id, pinned[0])


def test_repushing_a_pinned_tag_with_another_image_is_refused_and_the_registry_is_unchanged(registry, published):
    repository, image_id, digest = published.repository, published.image_id, published.digest
    before = {tag: registry_manifest(registry, repository, tag) for tag in ("latest", PINNED)}
    tags_before = registry_tags(registry, repository)  # latest, the pinned tag, the attestations' sha256-<hex>
    variant = variant_of(published.image_id)
    tag_locally(variant, repository, ["latest", PINNED])

    run = push(published.recipe, repository, published.docker_config)

    assert run.returncode == 14, run.stderr
    lines = error_lines(run)
    assert len(lines) == 1, run.stderr
    line = lines[0]
    assert f"{repository}:{PINNED}" in line
    assert digest in line and image_id in line and variant in line
    assert "--force" in line
    # Nothing was pushed: both tags still name the first image, and no tag was added.
    assert {tag: registry_manifest(registry, repository, tag) for tag in ("latest", PINNED)} == before
    assert registry_tags(registry, repository) == tags_before
    assert tags_before == sorted(["latest", PINNED, "sha256-" + digest.removeprefix("sha256:")])


def test_the_same_image_may_be_pushed_again(registry, published):
    run = push(published.recipe, published.repository, published.docker_config)
    assert run.returncode == 0, run.stderr
    assert registry_manifest(registry, published.repository, PINNED)[0] == published.digest


def test_force_repoints_the_pinned_tag_and_says_so(registry, published):
    repository, digest = published.repository, published.digest
    variant = variant_of(published.image_id)
    tag_locally(variant, repository, ["latest", PINNED])

    run = push(published.recipe, repository, published.docker_config, "--force", "--json")

    assert run.returncode == 0, run.stderr
    forced = [event for event in json_events(run.stderr) if event.get("forced_tag")]
    assert [event["forced_tag"] for event in forced] == [f"{repository}:{PINNED}"]
    assert forced[0]["previous_digest"] == digest
    pushed = json.loads(run.stdout)["pushed_digest"]
    assert pushed != digest
    for tag in ("latest", PINNED):
        now = registry_manifest(registry, repository, tag)
        assert now[0] == pushed and now[1]["config"]["digest"] == variant


def test_latest_moves_when_the_pinned_tag_is_new(registry, published):
    repository, digest = published.repository, published.digest
    variant = variant_of(published.image_id)
    tag_locally(variant, repository, ["latest", NEXT_DAY_PINNED])

    run = push(published.recipe, repository, published.docker_config, env={"SOURCE_DATE_EPOCH": NEXT_DAY_EPOCH})

    assert run.returncode == 0, run.stderr
    assert registry_manifest(registry, repository, "latest")[1]["config"]["digest"] == variant
    assert registry_manifest(registry, repository, NEXT_DAY_PINNED)[1]["config"]["digest"] == variant
    assert registry_manifest(registry, repository, PINNED)[0] == digest  # the old pinned tag stays


def test_build_push_onto_a_taken_pinned_tag_tags_and_pushes_nothing(
    synthetic_base_amd64, registry, published, tmp_path
):
    """A real build (the gate included) of the recipe with --push into that repository: refused before tagging."""
    repository, digest = published.repository, published.digest
    base = synthetic_base_amd64
    recipe = recipe_copy(tmp_path / "build", "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    before = {tag: registry_manifest(registry, repository, tag) for tag in ("latest", PINNED)}
    local_before = {tag: local_image_id(f"{repository}:{tag}") for tag in local_tags(repository)}

    run = cli(
        "build",
        "--recipe",
        str(recipe),
        "--repository",
        repository,
        "--push",
        "--json",
        docker_config_dir=published.docker_config,
    )

    assert run.returncode == 14, run.stderr[-4000:]
    phases = [event.get("phase") for event in json_events(run.stderr) if event.get("event") == "phase"]
    failures = [event for event in json_events(run.stderr) if event.get("event") == "error"]
    assert [event["type"] for event in failures] == ["PinnedTagTaken"]
    message = failures[0]["message"]
    assert f"{repository}:{PINNED}" in message and digest in message and published.image_id in message
    assert {tag: registry_manifest(registry, repository, tag) for tag in ("latest", PINNED)} == before
    assert {tag: local_image_id(f"{repository}:{tag}") for tag in local_tags(repository)} == local_before
    assert "tag" not in phases and "push" not in phases, phases


def test_the_check_refuses_a_wrong_password_in_one_line(registry, published, tmp_path):
    from stack_e2e import docker_config

    wrong = docker_config(tmp_path, registry.address, registry.username, "not-the-password")
    run = push(published.recipe, published.repository, wrong)
    assert run.returncode == 7, run.stderr
    lines = error_lines(run)
    assert len(lines) == 1, run.stderr
    assert f"{published.repository}:{PINNED}" in lines[0]
    assert "the registry refused the credentials from the Docker config" in lines[0]
    assert lines[0].endswith(f"run `docker login {registry.address}`")
    assert "Traceback" not in run.stderr


def test_the_check_without_a_login_is_one_line(registry, published, tmp_path):
    empty = tmp_path / "empty-docker-config"
    empty.mkdir()
    run = push(published.recipe, published.repository, empty)
    assert run.returncode == 7, run.stderr
    lines = error_lines(run)
    assert len(lines) == 1 and "no basic auth credentials" in lines[0], run.stderr


def test_an_unreachable_registry_is_reported_at_once(registry, published, tmp_path):
    # A loopback port nothing listens on: the shared registry stays up for everyone else.
    repository = f"127.0.0.1:9/e2e-{uuid.uuid4().hex[:10]}/pinned-tags"
    tag_locally(published.image_id, repository, ["latest", PINNED])
    try:
        run = push(
            published.recipe,
            repository,
            published.docker_config,
            env={"STACKBUILD_REGISTRY_ATTEMPTS": "3", "STACKBUILD_REGISTRY_BACKOFF": "0.2"},
        )
    finally:
        for tag in ("latest", PINNED):
            subprocess.run(["docker", "rmi", f"{repository}:{tag}"], capture_output=True)
    assert run.returncode == 8, run.stderr
    assert "next in" not in run.stderr  # a refused connection is not retried
    lines = error_lines(run)
    assert len(lines) == 1, run.stderr
    assert "registry unreachable (not retried)" in lines[0] and "connection refused" in lines[0]
