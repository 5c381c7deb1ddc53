"""End to end: the SBOM and the provenance a push attaches to the image digest, and `verify` checking them.

The local registry is Distribution 2.8 (no referrers API), so the artifacts
are found through the fallback tag ``sha256-<hex>``. Everything the tests
expect is read independently: the registry with plain HTTP requests, the
overlay's patched sha256 from the series' lock.json, the base digest from
the infra's record, the gate report from the image with `docker cp`.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from stack_e2e import PAYLOAD_DIR, cli, json_events, recipe_copy, repository_name, unique_repository
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.image.registry import MANIFEST_ACCEPT

pytestmark = [pytest.mark.docker, pytest.mark.registry]

CYCLONEDX = "application/vnd.cyclonedx+json"
IN_TOTO = "application/vnd.in-toto+json"
SERIES_LOCK = REPO / "overlay" / "series" / f"vllm-{DEFAULT_VERSION}" / "lock.json"


@dataclass
class Pushed:
    recipe: Path
    repository: str
    docker_config: Path
    image_id: str
    digest: str

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"


def get(registry, repository: str, path: str, accept: str = MANIFEST_ACCEPT) -> requests.Response:
    return requests.get(
        f"http://{registry.address}/v2/{repository_name(repository)}/{path}",
        headers={"Accept": accept},
        auth=(registry.username, registry.password),
        timeout=30,
    )


def artifacts(registry, pushed: Pushed) -> dict[str, dict]:
    """{artifactType: {"manifest": ..., "document": parsed JSON}} from the fallback tag's index."""
    index = get(registry, pushed.repository, f"manifests/sha256-{pushed.digest.removeprefix('sha256:')}")
    assert index.status_code == 200, index.text
    assert index.json()["mediaType"] == "application/vnd.oci.image.index.v1+json"
    out = {}
    for entry in index.json()["manifests"]:
        manifest = get(registry, pushed.repository, f"manifests/{entry['digest']}").json()
        (layer,) = manifest["layers"]
        blob = get(registry, pushed.repository, f"blobs/{layer['digest']}", accept="*/*")
        assert "sha256:" + hashlib.sha256(blob.content).hexdigest() == layer["digest"]
        out[entry["artifactType"]] = {"manifest": manifest, "document": json.loads(blob.content)}
    return out


def image_file(reference: str, path: str) -> bytes:
    container = subprocess.run(
        ["docker", "create", reference, "/nonexistent"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        return subprocess.run(["docker", "cp", f"{container}:{path}", "-"], capture_output=True, check=True).stdout
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)


def tar_member(archive: bytes) -> bytes:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = next(m for m in tar.getmembers() if m.isfile())
        return tar.extractfile(member).read()


def build_and_push(registry, base, tmp: Path, stem: str) -> Pushed:
    recipe = recipe_copy(tmp, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    repository = unique_repository(registry.address, stem)
    report = tmp / "build-report.json"
    run = cli(
        "build",
        "--recipe",
        str(recipe),
        "--repository",
        repository,
        "--push",
        "--json",
        "--report",
        str(report),
        docker_config_dir=registry.docker_config,
    )
    assert run.returncode == 0, run.stderr[-6000:]
    data = json.loads(report.read_text())
    assert set(data["attestations"]) == {"sbom", "provenance", "found_via"}
    return Pushed(recipe, repository, registry.docker_config, data["image_id"], data["pushed_digest"])


@pytest.fixture(scope="module")
def pushed(registry, synthetic_base_amd64, tmp_path_factory) -> Pushed:
    return build_and_push(registry, synthetic_base_amd64, tmp_path_factory.mktemp("attest"), "attested")


def test_the_registry_has_no_referrers_api_so_the_fallback_tag_lists_both(registry, pushed):
    assert get(registry, pushed.repository, f"referrers/{pushed.digest}").status_code == 404
    found = artifacts(registry, pushed)
    assert set(found) == {CYCLONEDX, IN_TOTO}
    for artifact_type, artifact in found.items():
        assert artifact["manifest"]["artifactType"] == artifact_type
        assert artifact["manifest"]["subject"]["digest"] == pushed.digest


def test_the_sbom_lists_the_images_python_packages_and_the_overlays_files(registry, pushed):
    sbom = artifacts(registry, pushed)[CYCLONEDX]["document"]
    assert sbom["bomFormat"] == "CycloneDX" and sbom["specVersion"] == "1.6"
    assert sbom["metadata"]["component"]["version"] == pushed.digest
    libraries = {c["name"].lower(): c for c in sbom["components"] if c["type"] == "library"}
    # The synthetic base installs the default release's own wheel (tests/infra/README.md).
    assert libraries["vllm"]["version"] == DEFAULT_VERSION
    assert libraries["vllm"]["purl"] == f"pkg:pypi/vllm@{DEFAULT_VERSION}"
    files = {c["name"]: c["hashes"][0]["content"] for c in sbom["components"] if c["type"] == "file"}
    lock = json.loads(SERIES_LOCK.read_text())["files"]
    assert len(files) == len(lock)
    for relative, hashes in lock.items():
        (path,) = [p for p in files if p.endswith("/" + relative)]
        assert files[path] == hashes["patched_sha256"], relative


def test_the_provenance_records_what_the_image_was_made_from(registry, pushed, synthetic_base_amd64):
    statement = artifacts(registry, pushed)[IN_TOTO]["document"]
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [
        {"name": pushed.repository, "digest": {"sha256": pushed.digest.removeprefix("sha256:")}}
    ]
    definition = statement["predicate"]["buildDefinition"]
    assert (
        definition["externalParameters"]["recipe"]["sha256"] == hashlib.sha256(pushed.recipe.read_bytes()).hexdigest()
    )
    config = json.loads(get(registry, pushed.repository, "blobs/" + pushed.image_id, accept="*/*").content)
    labels = config["config"]["Labels"]
    assert (
        definition["externalParameters"]["overlay"]["series_sha256"] == labels["io.github.glm53.overlay.series.sha256"]
    )
    base = next(d for d in definition["resolvedDependencies"] if d["uri"].startswith("docker://"))
    assert "sha256:" + base["digest"]["sha256"] == synthetic_base_amd64.digest
    gate = definition["internalParameters"]["gate"]
    report = tar_member(image_file(pushed.reference, f"{PAYLOAD_DIR}/geometry-report.json"))
    assert gate["verdict"] == "pass"
    assert gate["report"]["digest"]["sha256"] == hashlib.sha256(report).hexdigest()


def qualification(pushed: Pushed, when: str, verdict: str, tokens_per_s: float, acceptance: float, recipe_sha256: str):
    from stackbuild.core.qualification_record import QualificationRecord

    return QualificationRecord(
        repository=pushed.repository,
        digest=pushed.digest,
        qualified_on=when,
        verdict=verdict,
        url="http://gb300.example:8000",
        model="glm-5.3-flash",
        vllm_version=DEFAULT_VERSION,
        recipe_name="b200-amd64",
        recipe_sha256=recipe_sha256,
        hardware={"gpu": "B200"},
        served_flags=("/models/target",),
        decode_tokens_per_s=tokens_per_s,
        speculation_configured=True,
        acceptance_rate=acceptance,
        mean_accepted_length=1 + 6 * acceptance,
        acceptance_per_position=(0.8, 0.6, 0.4),
        findings=() if verdict == "pass" else ("qualify.min_acceptance: measured 0.1, expected at least 0.5",),
        result={"schema": "glm53.qualify/v1"},
    )


def test_verify_checks_both_and_lists_the_qualifications(registry, pushed, monkeypatch):
    from stackbuild.core.reference import ImageReference
    from stackbuild.image.connect import connect
    from stackbuild.image.qualification import attach_record, attach_target
    from stackbuild.image.verify import qualification_lines

    monkeypatch.setenv("DOCKER_CONFIG", str(pushed.docker_config))
    target = attach_target(connect(), ImageReference(pushed.repository, digest=pushed.digest))
    recipe_sha = hashlib.sha256(pushed.recipe.read_bytes()).hexdigest()
    # Attached out of date order; the second with a recipe file other than the image's.
    attach_record(target, qualification(pushed, "2026-03-02T10:00:00Z", "fail", 140.5, 0.1, recipe_sha))
    attach_record(target, qualification(pushed, "2026-03-01T09:00:00Z", "pass", 412.25, 0.6, "0" * 64))
    found = artifacts_all(registry, pushed)
    assert [e["artifactType"] for e in found].count("application/vnd.glm53.qualification.v1+json") == 2
    assert {CYCLONEDX, IN_TOTO} <= {e["artifactType"] for e in found}  # the SBOM and provenance stay

    run = cli(
        "verify", pushed.reference, "--recipe", str(pushed.recipe), "--json", docker_config_dir=pushed.docker_config
    )
    assert run.returncode == 0, run.stderr[-4000:]
    phases = [(e["phase"], e["status"]) for e in json_events(run.stderr) if e["event"] == "phase"]
    assert ("attestations", "done") in phases
    result = json.loads(run.stdout)
    listed = [
        (q["qualified_on"], q["verdict"], q["decode_tokens_per_s"], q["acceptance_rate"], q["recipe_matches_image"])
        for q in result["qualifications"]
    ]
    assert listed == [
        ("2026-03-01T09:00:00Z", "pass", 412.25, 0.6, False),
        ("2026-03-02T10:00:00Z", "fail", 140.5, 0.1, True),
    ]
    assert result["qualifications"][1]["findings"] == ["qualify.min_acceptance: measured 0.1, expected at least 0.5"]
    lines = qualification_lines(result)
    assert lines[0].startswith("qualification 2026-03-01T09:00:00Z: pass, decode 412.2 tok/s, acceptance 60.0%")
    assert lines[0].endswith("measured with another recipe file than the image was built from")
    assert lines[1].startswith("qualification 2026-03-02T10:00:00Z: fail, decode 140.5 tok/s, acceptance 10.0%")


def artifacts_all(registry, pushed: Pushed) -> list[dict]:
    """The fallback tag's index entries (several qualifications share one artifact type)."""
    index = get(registry, pushed.repository, f"manifests/sha256-{pushed.digest.removeprefix('sha256:')}")
    assert index.status_code == 200, index.text
    return index.json()["manifests"]


@pytest.fixture
def second_copy(registry, pushed) -> Pushed:
    """The same image pushed with `build.py push` to another repository of this test (attested there too)."""
    repository = unique_repository(registry.address, "attested-copy")
    for reference in subprocess.run(
        ["docker", "image", "inspect", "--format", '{{join .RepoTags "\\n"}}', pushed.image_id],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split():
        if reference.startswith(pushed.repository + ":"):
            subprocess.run(
                ["docker", "tag", pushed.image_id, repository + reference[len(pushed.repository) :]], check=True
            )
    run = cli(
        "push",
        "--recipe",
        str(pushed.recipe),
        "--repository",
        repository,
        "--json",
        docker_config_dir=pushed.docker_config,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout)
    assert result["pushed_digest"] == pushed.digest and result["attestations"]["found_via"].startswith("tag sha256-")
    return Pushed(pushed.recipe, repository, pushed.docker_config, pushed.image_id, pushed.digest)


def verify_problems(run: subprocess.CompletedProcess) -> list[str]:
    """The problem lines under verify's `error: ... does not match ...:` line."""
    lines = run.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: ") and "does not match" in line)
    return [line.strip() for line in lines[start + 1 :] if line.startswith("  ")]


def test_a_provenance_with_another_series_sha256_fails_verify_in_one_line(registry, second_copy, monkeypatch):
    from stackbuild.image.attach import attach
    from stackbuild.image.registry import RegistryClient

    statement = artifacts(registry, second_copy)[IN_TOTO]["document"]
    real = statement["predicate"]["buildDefinition"]["externalParameters"]["overlay"]["series_sha256"]
    forged = "0" * 64
    statement["predicate"]["buildDefinition"]["externalParameters"]["overlay"]["series_sha256"] = forged
    client = RegistryClient(second_copy.repository, plain_http=True)
    subject = get(registry, second_copy.repository, f"manifests/{second_copy.digest}")
    descriptor = {"mediaType": subject.json()["mediaType"], "digest": second_copy.digest, "size": len(subject.content)}
    monkeypatch.setenv("DOCKER_CONFIG", str(second_copy.docker_config))
    attach(client, descriptor, IN_TOTO, json.dumps(statement).encode(), {})
    assert artifacts(registry, second_copy)[IN_TOTO]["document"] == statement

    run = cli(
        "verify",
        second_copy.reference,
        "--recipe",
        str(second_copy.recipe),
        docker_config_dir=second_copy.docker_config,
    )

    assert run.returncode == 10, run.stderr[-4000:]
    assert verify_problems(run) == [f"provenance: series sha256 is {forged!r}, the image has {real!r}"]


def test_an_image_without_its_sbom_fails_verify(registry, second_copy):
    tag = f"sha256-{second_copy.digest.removeprefix('sha256:')}"
    index = get(registry, second_copy.repository, f"manifests/{tag}").json()
    index["manifests"] = [m for m in index["manifests"] if m["artifactType"] != CYCLONEDX]
    put = requests.put(
        f"http://{registry.address}/v2/{repository_name(second_copy.repository)}/manifests/{tag}",
        data=json.dumps(index),
        headers={"Content-Type": index["mediaType"]},
        auth=(registry.username, registry.password),
        timeout=30,
    )
    assert put.status_code == 201, put.text

    run = cli(
        "verify",
        second_copy.reference,
        "--recipe",
        str(second_copy.recipe),
        docker_config_dir=second_copy.docker_config,
    )

    assert run.returncode == 10, run.stderr[-4000:]
    (problem,) = verify_problems(run)
    assert problem.startswith(
        f"{second_copy.repository}@{second_copy.digest}: no SBOM ({CYCLONEDX}) refers to it (tag {tag})"
    )
