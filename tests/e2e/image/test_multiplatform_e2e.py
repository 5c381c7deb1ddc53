"""End to end: a multi-platform recipe (linux/amd64 + linux/arm64) built, pushed as one index, verified.

The upstream base tag is an image index offering both platforms; here the
test puts such an index over the two synthetic bases in the local registry
and pins the recipe to it with `build.py lock`. One build of both platforms
(arm64 through qemu: its gate imports vLLM under emulation, minutes) serves
every test in this module; the second engine's build ships that build's oracle
records. What the registry holds is read back with plain HTTP requests, not
through the driver's registry code.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import requests
from engines import FIRST, TestEngine
from signing_support import put_blob, put_manifest
from stack_e2e import cli, docker_login, json_events, recipe_copy, repository_name, unique_repository

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.image.registry import MANIFEST_ACCEPT

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.arm64]

PLATFORMS = ["linux/amd64", "linux/arm64"]
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
BASE_INDEX_TAG = f"v{DEFAULT_VERSION}-multiplatform"
# recipes/glm53-flash-dflash2-sm100 tags: latest and sm{family}-{date}-{rev}; the copy lies outside the
# repository, so {rev} is x + 11 hex digits of its inputs' digest; the date is SOURCE_DATE_EPOCH's.
PINNED_RE = re.compile(r"sm100-20251130-x[0-9a-f]{11}")


def http(registry, method: str, repository: str, path: str, **kwargs) -> requests.Response:
    headers = kwargs.pop("headers", {"Accept": MANIFEST_ACCEPT})
    return requests.request(
        method,
        f"http://{registry.address}/v2/{repository}/{path}",
        headers=headers,
        auth=(registry.username, registry.password),
        timeout=60,
        **kwargs,
    )


def manifest(registry, repository: str, reference: str) -> tuple[str, dict, bytes]:
    response = http(registry, "GET", repository, f"manifests/{reference}")
    assert response.status_code == 200, (reference, response.text)
    return response.headers["Docker-Content-Digest"], response.json(), response.content


def put_index(registry, repository: str, tag: str, entries: list[dict]) -> str:
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()
    response = http(registry, "PUT", repository, f"manifests/{tag}", data=body, headers={"Content-Type": OCI_INDEX})
    assert response.status_code == 201, response.text
    return "sha256:" + hashlib.sha256(body).hexdigest()


def platforms_of(index: dict) -> dict[str, str]:
    return {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in index["manifests"]}


@dataclass
class MultiBuild:
    recipe: Path
    repository: str
    docker_config: Path
    report: dict
    run: subprocess.CompletedProcess
    seconds: float
    engine: TestEngine  # where it was built


def own_base(registry, base) -> str:
    """``base`` with one label more, put into the registry beside it: the digest of an image of this module's own.

    The classic builder reuses the newest image built from the same parent by the same step (a COPY
    matched by its files' content). Built on the synthetic base itself, this module's rebuild would take
    the images of the amd64 tests building this patch series with --no-cache on another worker: equal
    in content, other ids, another index. On a parent of its own, its steps are a chain no other test builds.

    The new manifest is the base's own with another config: the same layer blobs, so the same digest in
    every run. An engine with the containerd image store that has unpacked the base's layers before does
    not fetch blobs it has unpacked under other digests: a push of the base again from an engine that
    compresses its layers anew would leave such an engine holding this image without them.
    """
    name = repository_name(base.image)
    _digest, document, _content = manifest(registry, name, base.digest)
    response = http(registry, "GET", name, f"blobs/{document['config']['digest']}", headers={})
    assert response.status_code == 200, response.text
    config = response.json()
    config["config"]["Labels"] = {
        **(config["config"].get("Labels") or {}),
        "org.glm53.test.multiplatform-base": base.arch,
    }
    blob = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    document["config"] = {**document["config"], "digest": put_blob(registry, base.image, blob), "size": len(blob)}
    return put_manifest(registry, base.image, document, tag=f"{BASE_INDEX_TAG}-{base.arch}")[0]


@pytest.fixture(scope="module")
def base_index(registry, synthetic_base_amd64, synthetic_base_arm64) -> tuple[str, str]:
    """(image, index digest): an OCI index over the two bases of this module, under one tag, as upstream publishes."""
    bases = {"amd64": synthetic_base_amd64, "arm64": synthetic_base_arm64}
    assert synthetic_base_amd64.image == synthetic_base_arm64.image
    name = repository_name(synthetic_base_amd64.image)
    entries = []
    for arch, base in bases.items():
        digest = own_base(registry, base)
        _digest, document, content = manifest(registry, name, digest)
        entries.append(
            {
                "mediaType": document["mediaType"],
                "digest": digest,
                "size": len(content),
                "platform": {"os": "linux", "architecture": arch},
            }
        )
    return synthetic_base_amd64.image, put_index(registry, name, BASE_INDEX_TAG, entries)


def record_name(platform: str) -> str:
    """The oracle record of one platform of a multi-platform recipe (docs/gate.md, the oracle record)."""
    return f"recipe.oracle.{platform.replace('/', '-')}.json"


def copy_records(source: MultiBuild, recipe: Path) -> None:
    """Each platform's oracle record of ``source``'s images, copied next to ``recipe`` by `build.py record
    --platform P` (the images are in the first engine)."""
    for platform in PLATFORMS:
        image = source.report["images"][platform]["image_id"]
        run = cli("record", "--recipe", str(recipe), "--platform", platform, "--image", image, "--json")
        assert run.returncode == 0, run.stderr[-3000:]
        assert json.loads(run.stdout)["record"] == str(recipe.with_name(record_name(platform)))
    assert not recipe.with_name("recipe.oracle.json").exists()


def _multi_build(
    registry, base_index, tmp: Path, engine: TestEngine, records_from: Optional[MultiBuild] = None
) -> MultiBuild:
    """The SM100 recipe (amd64 + arm64) locked to the base index, built on ``engine`` and pushed as one index
    (with the oracle records of ``records_from``'s images, and --keep-record, when given)."""
    import time

    image, index_digest = base_index
    config = docker_login(tmp, registry)
    env = engine.env({})
    recipe = recipe_copy(tmp, "glm53-flash-dflash2-sm100", base=image, tag=BASE_INDEX_TAG)
    lock = cli("lock", "--recipe", str(recipe), "--json", docker_config_dir=config, env=env)
    assert lock.returncode == 0, lock.stderr
    assert json.loads(lock.stdout)["digest"] == index_digest
    assert json.loads((recipe.parent / "recipe.lock.json").read_text())["base"]["platforms"] == PLATFORMS
    if records_from is not None:
        copy_records(records_from, recipe)
    repository = unique_repository(registry.address, f"glm53-sm100-{engine.name}")
    report_path = tmp / "build-report.json"
    started = time.monotonic()
    run = cli(
        "build",
        "--recipe",
        str(recipe),
        "--repository",
        repository,
        "--push",
        "--json",
        "--report",
        str(report_path),
        *(["--keep-record"] if records_from is not None else []),
        docker_config_dir=config,
        env=env,
        timeout=5400,
    )
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stderr[-6000:]
    print(f"\n[multi-platform e2e] build --push of linux/amd64 + linux/arm64 on {engine.name}: {seconds:.0f} s")
    return MultiBuild(recipe, repository, config, json.loads(report_path.read_text()), run, seconds, engine)


@pytest.fixture(scope="module")
def multi_build(docker_engine, registry, base_index, tmp_path_factory) -> MultiBuild:
    """The build on the first engine: every test of this module reads it."""
    first = TestEngine(FIRST, None, docker_engine)
    return _multi_build(registry, base_index, tmp_path_factory.mktemp("multi-build"), first)


@pytest.fixture(scope="module")
def engine_multi_build(request, target_engine, registry, base_index, tmp_path_factory) -> MultiBuild:
    """The build on each test engine (the main path's arm64 build on both): the first's is ``multi_build``.
    The others ship the first build's oracle record of each platform: their gates run (arm64's under qemu)
    without importing vLLM, which the first build and tests/e2e/image/test_build_e2e.py's arm64 builds do."""
    first = request.getfixturevalue("multi_build")
    if target_engine.name == FIRST:
        return first
    tmp = tmp_path_factory.mktemp(f"multi-build-{target_engine.name}")
    return _multi_build(registry, base_index, tmp, target_engine, records_from=first)


def test_the_index_holds_both_platforms_with_the_digests_the_builds_produced(registry, engine_multi_build):
    multi_build = engine_multi_build
    report, name = multi_build.report, repository_name(multi_build.repository)
    assert report["status"] == "pushed" and report["platforms"] == PLATFORMS
    assert report["tags"][0] == "latest" and PINNED_RE.fullmatch(report["tags"][1]), report["tags"]
    pushed = {platform: report["images"][platform]["pushed_digest"] for platform in PLATFORMS}
    assert len(set(pushed.values())) == 2
    for tag in report["tags"]:
        digest, index, _content = manifest(registry, name, tag)
        assert digest == report["pushed_digest"]
        assert index["mediaType"] == OCI_INDEX
        assert platforms_of(index) == pushed
    for platform in PLATFORMS:
        arch = platform.split("/")[1]
        image_id = report["images"][platform]["image_id"]
        config_digest = report["images"][platform]["config_digest"]
        # The engine's image, as the build left it under its per-platform tag, is the one the index names.
        local = subprocess.run(
            ["docker", "image", "inspect", f"{multi_build.repository}:{report['tags'][1]}-{arch}"],
            capture_output=True,
            text=True,
            check=True,
            env=multi_build.engine.env(),
        )
        (inspected,) = json.loads(local.stdout)
        assert (inspected["Id"], inspected["Os"], inspected["Architecture"]) == (image_id, "linux", arch)
        digest, child, _content = manifest(registry, name, pushed[platform])
        assert child["config"]["digest"] == config_digest
        # The engine's id: the config digest in the classic store, the manifest it pushed in containerd's.
        assert image_id == (config_digest if multi_build.engine.name == FIRST else digest)
        assert manifest(registry, name, f"{report['tags'][1]}-{arch}")[0] == pushed[platform]
        config = json.loads(http(registry, "GET", name, f"blobs/{config_digest}", headers={}).content)
        assert (config["os"], config["architecture"]) == ("linux", arch)
        assert config["config"]["Labels"]["io.github.glm53.platform"] == platform
        # Its SBOM and provenance refer to its own digest.
        attached = manifest(registry, name, "sha256-" + digest.removeprefix("sha256:"))[1]
        assert sorted(m["artifactType"] for m in attached["manifests"]) == [
            "application/vnd.cyclonedx+json",
            "application/vnd.in-toto+json",
        ]
    phases = [
        e["phase"] for e in json_events(multi_build.run.stderr) if e["event"] == "phase" and e["status"] == "done"
    ]
    assert phases.count("build") == 2 and phases.count("geometry-report") == 2
    assert phases.index("index") > phases.index("attest") > phases.index("push") > phases.index("tag")


def test_each_platform_keeps_its_own_oracle_record(engine_multi_build):
    """A multi-platform recipe keeps one record per platform: a build that ships both checks each gate
    against its own and, with --keep-record, rewrites neither (one file would hold only the last platform's,
    and the other platform's gate would import vLLM in every build)."""
    multi_build = engine_multi_build
    for platform in PLATFORMS:
        record = multi_build.report["images"][platform]["oracle_record"]
        if multi_build.engine.name == FIRST:  # no record shipped: each gate imported vLLM
            assert record == {"shipped": None, "gate_checked_against": "imported vLLM", "kept": None}, platform
        else:
            shipped = str(multi_build.recipe.with_name(record_name(platform)))
            assert record == {"shipped": shipped, "gate_checked_against": "record", "kept": None}, platform


def test_verify_passes_for_every_platform(engine_multi_build):
    multi_build = engine_multi_build
    run = cli(
        "verify",
        multi_build.report["pushed_reference"],
        "--recipe",
        str(multi_build.recipe),
        "--json",
        docker_config_dir=multi_build.docker_config,
        env=multi_build.engine.env({}),
        timeout=3600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout)
    assert result["verdict"] == "pass" and result["index"] is True and sorted(result["platforms"]) == PLATFORMS
    for platform in PLATFORMS:
        checked = result["platforms"][platform]
        assert checked["digest"] == multi_build.report["images"][platform]["pushed_digest"]
        assert checked["image_id"] == multi_build.report["images"][platform]["image_id"]
        assert (checked["platform"], checked["verdict"], checked["geometry_verdict"]) == (platform, "pass", "pass")
        # Each platform's gate held to vLLM's answer that platform's build recorded (no vLLM import under qemu).
        assert checked["geometry_report"]["oracle"]["source"] == "record", platform
    gates = [
        e
        for e in json_events(run.stderr)
        if e["event"] == "phase" and e["phase"] == "geometry gate" and e["status"] == "done"
    ]
    assert len(gates) == 2


@dataclass
class Swapped:
    image_digest: str  # the other arm64 image's manifest
    entries: list[dict]  # the build's index entries, arm64 re-pointed at it


@pytest.fixture(scope="module")
def swapped(registry, multi_build) -> Swapped:
    """Another arm64 image (the build's, one label more, never attested) and the index entries naming it."""
    report, name = multi_build.report, repository_name(multi_build.repository)
    arm64 = report["images"]["linux/arm64"]["image_id"]
    dockerfile = f"FROM {arm64}\nLABEL org.glm53.test.swapped={uuid.uuid4().hex}\n"
    built = subprocess.run(
        ["docker", "build", "-q", "-"],
        input=dockerfile.encode(),
        capture_output=True,
        check=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    swapped_id = built.stdout.decode().split()[-1]
    swapped_ref = f"{multi_build.repository}:swapped-arm64"
    subprocess.run(["docker", "tag", swapped_id, swapped_ref], check=True)
    subprocess.run(
        ["docker", "--config", str(multi_build.docker_config), "push", swapped_ref], check=True, capture_output=True
    )
    digest, document, content = manifest(registry, name, "swapped-arm64")
    assert document["config"]["digest"] == swapped_id
    _digest, index, _content = manifest(registry, name, report["pushed_digest"])
    entries = [
        (
            {**m, "mediaType": document["mediaType"], "digest": digest, "size": len(content)}
            if m["platform"]["architecture"] == "arm64"
            else m
        )
        for m in index["manifests"]
    ]
    return Swapped(digest, entries)


def test_verify_fails_in_one_line_when_one_platforms_image_is_swapped(registry, multi_build, swapped):
    """The arm64 entry re-pointed at another arm64 image: exit 10, one problem line naming the platform and image."""
    name = repository_name(multi_build.repository)
    digest = put_index(registry, name, "swapped", swapped.entries)
    swapped_digest = swapped.image_digest

    run = cli(
        "verify",
        f"{multi_build.repository}@{digest}",
        "--recipe",
        str(multi_build.recipe),
        docker_config_dir=multi_build.docker_config,
        timeout=3600,
    )

    assert run.returncode == 10, run.stderr[-4000:]
    lines = run.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: ") and "does not match" in line)
    problems = [line.strip() for line in lines[start + 1 :] if line.startswith("  ")]
    assert problems == [
        f"linux/arm64: {multi_build.repository}@{swapped_digest}: no SBOM and no provenance refer to it "
        f"(tag sha256-{swapped_digest.removeprefix('sha256:')}); this project did not push it"
    ]


def test_building_the_same_inputs_again_gives_the_same_tags_and_index(multi_build, tmp_path):
    """The engine's cache makes it quick; the pinned tags name the same images, so the push is accepted."""
    run = cli(
        "build",
        "--recipe",
        str(multi_build.recipe),
        "--repository",
        multi_build.repository,
        "--push",
        "--json",
        "--report",
        str(tmp_path / "again.json"),
        docker_config_dir=multi_build.docker_config,
        timeout=3600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    again = json.loads(run.stdout)
    assert again["tags"] == multi_build.report["tags"]
    assert again["pushed_digest"] == multi_build.report["pushed_digest"]


def test_build_py_index_puts_the_same_index_over_the_pushed_platform_images(multi_build):
    """What CI's index job runs after each platform was pushed on its own runner (`build --platform P --push`)."""
    run = cli(
        "index",
        "--recipe",
        str(multi_build.recipe),
        "--repository",
        multi_build.repository,
        "--json",
        docker_config_dir=multi_build.docker_config,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout)
    assert result["pushed_digest"] == multi_build.report["pushed_digest"]
    assert {p: i["pushed_digest"] for p, i in result["images"].items()} == {
        p: multi_build.report["images"][p]["pushed_digest"] for p in PLATFORMS
    }


def test_build_py_index_without_a_platforms_image_is_one_line(registry, multi_build):
    repository = unique_repository(registry.address, "glm53-sm100-empty")
    run = cli(
        "index",
        "--recipe",
        str(multi_build.recipe),
        "--repository",
        repository,
        docker_config_dir=multi_build.docker_config,
    )
    assert run.returncode == 9, run.stderr
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    pinned = multi_build.report["tags"][1]
    assert line == (
        f"error: {repository}:{pinned}-amd64: not in the registry; push the linux/amd64 image first "
        "(build --platform linux/amd64 --push)"
    )


def test_push_puts_the_built_platform_images_and_their_index_into_another_repository(registry, multi_build):
    """`build.py push` (no build): the engine's images of both platforms, their attestations and one index
    under every tag, in a repository that held nothing."""
    repository = unique_repository(registry.address, "glm53-sm100-push")
    name = repository_name(repository)
    for platform in PLATFORMS:  # the engine's tags of each platform's image, under the new repository
        image_id = multi_build.report["images"][platform]["image_id"]
        tags = subprocess.run(
            ["docker", "image", "inspect", "--format", '{{join .RepoTags "\\n"}}', image_id],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for reference in tags:
            if reference.startswith(multi_build.repository + ":"):
                subprocess.run(
                    ["docker", "tag", image_id, repository + reference[len(multi_build.repository) :]], check=True
                )
    run = cli(
        "push",
        "--recipe",
        str(multi_build.recipe),
        "--repository",
        repository,
        "--json",
        docker_config_dir=multi_build.docker_config,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout)
    assert result["tags"] == multi_build.report["tags"]
    index_digest = result["pushed_digest"]
    assert result["pushed_reference"] == f"{repository}@{index_digest}"
    for tag in result["tags"]:
        digest, index, _content = manifest(registry, name, tag)
        assert (digest, index["mediaType"]) == (index_digest, OCI_INDEX)
        assert sorted(platforms_of(index)) == PLATFORMS
    _digest, index, _content = manifest(registry, name, index_digest)
    for platform, digest in platforms_of(index).items():
        _d, image, _c = manifest(registry, name, digest)
        # The image pushed is the one built for that platform (its config digest is the engine's image id).
        assert image["config"]["digest"] == multi_build.report["images"][platform]["image_id"]
        assert result["images"][platform]["pushed_digest"] == digest
        attached = manifest(registry, name, "sha256-" + digest.removeprefix("sha256:"))[1]
        assert sorted(m["artifactType"] for m in attached["manifests"]) == [
            "application/vnd.cyclonedx+json",
            "application/vnd.in-toto+json",
        ]


def test_a_pinned_tag_naming_other_images_is_refused_and_the_registry_is_unchanged(registry, multi_build, swapped):
    """The pinned tag re-pointed (by hand) at an index whose arm64 image is another: `push` refuses, exit 14."""
    report, name = multi_build.report, repository_name(multi_build.repository)
    pinned = report["tags"][1]
    put_index(registry, name, pinned, swapped.entries)
    before = {tag: manifest(registry, name, tag)[0] for tag in report["tags"]}

    run = cli(
        "push",
        "--recipe",
        str(multi_build.recipe),
        "--repository",
        multi_build.repository,
        docker_config_dir=multi_build.docker_config,
    )

    assert run.returncode == 14, run.stderr[-4000:]
    (line,) = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert f"{multi_build.repository}:{pinned}: the pinned tag already points at {before[pinned]}" in line
    assert report["images"]["linux/arm64"]["image_id"] in line
    assert {tag: manifest(registry, name, tag)[0] for tag in report["tags"]} == before
