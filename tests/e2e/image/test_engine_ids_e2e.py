"""End to end with image ids that are not config digests, as Docker's containerd image store names images.

Docker 29 installs keep images in containerd's content store, whose image id is
the image's manifest (or index) digest, not its config's. This machine's
engine (docker.io 20.10) has the classic store. :class:`ContainerdIds` is the
real :class:`DockerEngine` reporting every image under the id the containerd
store would give it (a digest that is not the config's) and taking those ids
back when handed them (tag, read a file, run); everything else, the registry
included, is real. The build, the push and the pinned-tag check must then
decide what was pushed, and whether a pinned tag already names this image,
from the registry alone. The session's build (amd64_build) makes every build
step a cache hit.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Optional

import pytest
from stack_e2e import SOURCE_DATE_EPOCH, registry_manifest, tag_locally, unique_repository, variant_of

from stackbuild.core.build_report import REPORT_SCHEMA, report_engine
from stackbuild.core.errors import PinnedTagTaken
from stackbuild.core.recipe import load_recipe
from stackbuild.image.connect import connect
from stackbuild.image.engine import DockerEngine
from stackbuild.image.engine_api import BuildOutcome, ImageInfo
from stackbuild.image.pipeline import run_build, run_push
from stackbuild.image.plan import make_plan

pytestmark = [pytest.mark.docker, pytest.mark.registry]


class ContainerdIds(DockerEngine):
    """The real engine, naming each image as the containerd image store would: not by its config digest."""

    def __init__(self, real: DockerEngine):
        super().__init__(real.client, real.endpoint)
        self.config_of: dict[str, str] = {}  # reported id -> the classic store's id (the config digest)

    def reported(self, config_digest: str) -> str:
        reported = "sha256:" + hashlib.sha256(f"manifest of {config_digest}".encode()).hexdigest()
        self.config_of[reported] = config_digest
        return reported

    def _own(self, reference: str) -> str:
        return self.config_of.get(reference, reference)

    def _renamed(self, info: Optional[ImageInfo]) -> Optional[ImageInfo]:
        return None if info is None else replace(info, id=self.reported(info.id))

    def inspect_image(self, reference: str) -> Optional[ImageInfo]:
        return self._renamed(super().inspect_image(self._own(reference)))

    def build(self, context_dir: str, platform: str, on_event, *, nocache: bool = False) -> BuildOutcome:
        outcome = super().build(context_dir, platform, on_event, nocache=nocache)
        if outcome.image_id and outcome.image_id not in self.config_of:
            outcome = replace(outcome, image_id=self.reported(outcome.image_id))
        return outcome

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        super().tag(self._own(image_id), repository, tag)

    def read_file(self, image: str, path: str) -> Optional[bytes]:
        return super().read_file(self._own(image), path)

    def run(self, image: str, entrypoint: list[str], args: list[str], platform: Optional[str] = None):
        return super().run(self._own(image), entrypoint, args, platform)


@pytest.fixture
def environment(amd64_build, monkeypatch):
    monkeypatch.setenv("DOCKER_CONFIG", str(amd64_build.docker_config))
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    monkeypatch.setenv("STACKBUILD_REGISTRY_BACKOFF", "0.5")
    monkeypatch.setenv("STACKBUILD_REGISTRY_ATTEMPTS", "3")


def test_build_push_and_the_pinned_tag_check_go_by_the_registry_not_the_engines_id(
    amd64_build, registry, environment, tmp_path
):
    repository = unique_repository(registry.address, "containerd-ids")
    recipe = load_recipe(amd64_build.recipe)
    plans = [make_plan(recipe.for_platform(p), repository=repository) for p in recipe.platforms]
    engine = ContainerdIds(connect())
    report_path = tmp_path / "build-report.json"

    report = run_build(plans, push=True, report_path=report_path, engine=engine)

    # The report names the image as the engine does, and what the registry holds as the registry does.
    assert report == json.loads(report_path.read_text())
    assert report["status"] == "pushed" and report["schema"] == REPORT_SCHEMA
    config_digest = engine.config_of[report["image_id"]]
    assert report["image_id"] != config_digest
    for tag in report["tags"]:
        digest, manifest = registry_manifest(registry, repository, tag)
        assert digest == report["pushed_digest"]
        assert manifest["config"]["digest"] == report["config_digest"] == config_digest
    assert report_engine(report) == engine.about()

    # The same image pushed again: its pinned tag already names it (by content), so the push is accepted.
    again = run_push(plans, report_path=report_path, engine=engine)
    assert again["pushed_digest"] == report["pushed_digest"] and again["config_digest"] == config_digest
    assert json.loads(report_path.read_text())["pushed_digest"] == report["pushed_digest"]

    # Another image under the same tags is refused before anything is pushed.
    pinned = [tag for tag in report["tags"] if tag != "latest"]
    before = {tag: registry_manifest(registry, repository, tag) for tag in report["tags"]}
    variant = variant_of(config_digest)
    tag_locally(variant, repository, report["tags"])
    with pytest.raises(PinnedTagTaken) as refused:
        run_push(plans, report_path=report_path, engine=engine)
    assert f"{repository}:{pinned[0]}" in str(refused.value) and report["pushed_digest"] in str(refused.value)
    assert engine.reported(variant) in str(refused.value)
    assert {tag: registry_manifest(registry, repository, tag) for tag in report["tags"]} == before
