"""End to end: build from the synthetic base with the real engine, push to the real registry.

No mocks: `build.py` runs in a subprocess against the Docker engine and the
authenticated local registry the infra fixtures start; checks read the
registry over HTTP and the image through the docker CLI.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
from pathlib import PurePosixPath

import pytest
from stack_e2e import (
    PAYLOAD_DIR,
    SOURCE_DATE_EPOCH,
    cli,
    docker_config,
    json_events,
    local_tags,
    recipe_copy,
    registry_tags,
    remove_image_tags,
    repository_name,
    unique_repository,
)

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.recipe import load_recipe
from stackbuild.image.plan import make_plan

pytestmark = [pytest.mark.docker, pytest.mark.registry]

EXPECTED_TAGS = ["latest", "sm100-b200-20251130"]


def docker(*args: str, config=None, check=True, **kwargs) -> subprocess.CompletedProcess:
    prefix = ["docker"] + (["--config", str(config)] if config else [])
    return subprocess.run(prefix + list(args), capture_output=True, check=check, **kwargs)


def image_file(image: str, path: str) -> bytes:
    """A file's bytes from an image, read with the docker CLI (create, cp, rm)."""
    cid = docker("create", image, "/nonexistent", text=True).stdout.strip()
    try:
        tar = docker("cp", f"{cid}:{path}", "-").stdout
    finally:
        docker("rm", "-f", cid)
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        member = next(m for m in archive.getmembers() if m.isfile())
        return archive.extractfile(member).read()


def test_happy_path_build_push_and_pull_back(main_build, on_engine, registry, synthetic_base_amd64, monkeypatch):
    build = main_build
    report = build.report
    # The report on stdout is the report in the file; the image went to the registry under both tags.
    assert json.loads(build.run.stdout) == report == json.loads(build.report_path.read_text())
    assert report["status"] == "pushed" and report["tags"] == EXPECTED_TAGS
    assert report["base"]["digest"] == build.base_digest
    assert report["vllm_version"] == DEFAULT_VERSION and report["patch_series"] == f"vllm-{DEFAULT_VERSION}"
    assert report["geometry_verdict"] == "pass" and report["geometry_report"]["verdict"]["passed"] is True
    assert (report["os"], report["architecture"]) == ("linux", "amd64")
    assert set(report["phase_seconds"]) >= {"pull", "build", "verify-arch", "tag", "push"}
    # Both tags, and the tag holding the index of the SBOM and provenance that refer to the digest.
    attestations_tag = "sha256-" + report["pushed_digest"].removeprefix("sha256:")
    assert registry_tags(
        registry.address, registry.username, registry.password, repository_name(build.repository)
    ) == sorted(EXPECTED_TAGS + [attestations_tag])

    # Progress: every step as it started, named, with its output and time, as JSON lines on stderr.
    events = json_events(build.run.stderr)
    steps = [e for e in events if e["event"] == "step"]
    assert [s["name"] for s in steps][:4] == ["base image", "payload copy", "patch series", "geometry gate"]
    assert all(s["total"] == len(steps) for s in steps)
    assert sum(e["event"] == "step_done" for e in events) == len(steps)
    assert {e["phase"] for e in events if e["event"] == "phase"} >= {"pull", "build", "verify-arch", "tag", "push"}

    # Pull it back by digest into an engine that no longer has it by name.
    remove_image_tags(build.repository)
    pinned = f"{build.repository}@{report['pushed_digest']}"
    docker("pull", pinned, config=build.docker_config)
    for tag in EXPECTED_TAGS:  # the push tests use the local tags again
        docker("tag", pinned, f"{build.repository}:{tag}")
    config = json.loads(docker("image", "inspect", pinned, text=True).stdout)[0]
    assert config["Id"] == report["image_id"]
    assert (config["Os"], config["Architecture"]) == ("linux", "amd64")

    # Its labels are the recipe's (the revision may move with new commits during the run).
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)  # as the CLI ran
    plan = make_plan(load_recipe(build.recipe), repository=build.repository)
    labels = config["Config"]["Labels"]
    expected = {k: v for k, v in plan.labels.items() if k != "org.opencontainers.image.revision"}
    assert {k: labels.get(k) for k in expected} == expected
    assert labels["io.github.glm53.geometry.verdict"] == "pass"

    # The patched files are in it, as the applier's manifest records them, and the gate's report.
    manifest = json.loads(image_file(pinned, f"{PAYLOAD_DIR}/manifest.json"))
    assert manifest["version"] == DEFAULT_VERSION and manifest["series_sha256"] == report["patch_series_sha256"]
    site = PurePosixPath(manifest["package_dir"]).parent
    assert len(manifest["files"]) >= 2
    for entry in manifest["files"]:
        data = image_file(pinned, str(site / entry["file"]))
        assert hashlib.sha256(data).hexdigest() == entry["sha256_after"] != entry["sha256_before"], entry["file"]
    geometry = json.loads(image_file(pinned, f"{PAYLOAD_DIR}/geometry-report.json"))
    assert geometry == report["geometry_report"]

    # The base's bytecode of the patched modules stays as it was (a removal would be a
    # whiteout, timed by the build): the manifest says why Python rejects each one for the
    # new source, and nothing was written or removed.
    kept = manifest["stale_bytecode"]["kept"]
    assert len(kept) == len(manifest["files"]) and manifest["stale_bytecode"]["removed"] == []
    assert manifest["bytecode"] == []
    for entry in kept:
        path = str(site / entry["file"])
        assert image_file(pinned, path) == image_file(synthetic_base_amd64.local_reference, path)


def test_the_engine_digest_is_the_registry_digest(main_build, registry):
    """The report's pushed digest and config digest are what the registry serves under each tag
    (asked over HTTP here)."""
    from stack_e2e import registry_manifest

    for tag in EXPECTED_TAGS:
        digest, manifest = registry_manifest(registry, main_build.repository, tag)
        assert digest == main_build.report["pushed_digest"]
        assert manifest["config"]["digest"] == main_build.report["config_digest"]


def test_drafter_that_does_not_fit_fails_at_the_gate_and_nothing_moves(
    registry, synthetic_base_amd64, logged_in, tmp_path
):
    base = synthetic_base_amd64
    recipe = recipe_copy(tmp_path, "drafter-misfit", base=base.image, tag=base.tag, digest=base.digest)
    repository = unique_repository(registry.address, "misfit")
    # The repository already holds an image: a failed build must leave its tag list as it was.
    seed = f"{repository}:previous"
    docker("tag", base.local_reference, seed)
    docker("push", seed, config=logged_in)
    before = registry_tags(registry.address, registry.username, registry.password, repository_name(repository))
    assert before == ["previous"]

    run = cli(
        "build",
        "--recipe",
        str(recipe),
        "--repository",
        repository,
        "--push",
        "--report",
        str(tmp_path / "r.json"),
        docker_config_dir=logged_in,
    )
    assert run.returncode == 5, run.stderr
    last = run.stderr.strip().splitlines()
    error = next(line for line in last if line.startswith("error: "))
    assert "build step failed: geometry gate" in error
    assert "no drafter block fits exactly" in run.stderr  # the gate's own reason, in the tail
    # The error line is the gate's first reason, not the step's last output lines.
    assert "build step failed: geometry gate: drafter layer " in error and "no drafter block fits exactly" in error
    assert "last output" not in error and "| " not in error
    assert "==> push" not in run.stderr and "==> tag" not in run.stderr
    assert registry_tags(registry.address, registry.username, registry.password, repository_name(repository)) == before
    assert local_tags(repository) == ["previous"]
    assert not (tmp_path / "r.json").exists()


def test_base_with_the_wrong_vllm_fails_at_the_patch_step(registry, wrong_vllm_base, logged_in, tmp_path):
    base = wrong_vllm_base
    recipe = recipe_copy(tmp_path, "wrong-vllm-base", base=base.image, tag=base.tag, digest=base.digest)
    repository = unique_repository(registry.address, "wrongvllm")
    run = cli("build", "--recipe", str(recipe), "--repository", repository, "--push", docker_config_dir=logged_in)
    assert run.returncode == 4, run.stderr
    error = next(line for line in run.stderr.splitlines() if line.startswith("error: "))
    assert error.startswith("error: build step failed: patch series: exited with code"), error
    assert DEFAULT_VERSION in run.stderr  # the applier says which version it wanted
    assert "==> tag" not in run.stderr
    assert local_tags(repository) == []
    assert registry_tags(registry.address, registry.username, registry.password, repository_name(repository)) == []


def test_a_failed_step_tags_nothing_even_without_push(synthetic_base_amd64, tmp_path, registry):
    """The architecture check fails (amd64 base, arm64 recipe): no tag appears, old tags stay."""
    base = synthetic_base_amd64
    recipe = recipe_copy(tmp_path, "glm53-flash-dflash2-gb300", base=base.image, tag=base.tag, digest=base.digest)
    repository = unique_repository(registry.address, "archfail")
    run = cli("build", "--recipe", str(recipe), "--repository", repository, "--no-push")
    # The patch step compares uname -m with the recipe's platform before it applies anything:
    # the architecture's exit code, one error line naming the recipe and the platform.
    assert run.returncode == 6, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == run.stderr.rstrip().splitlines()[-1], run.stderr
    assert errors[0].startswith(f"error: {recipe}: architecture check (patch series, step 3/"), errors[0]
    assert "the recipe's platform linux/arm64 needs the machine aarch64" in errors[0]
    # The step's own line names the machine it ran on; the series never started.
    assert (
        "| architecture check: this build runs on x86_64, the recipe's platform linux/arm64 needs aarch64" in run.stderr
    )
    assert "| overlay: " not in run.stderr
    assert local_tags(repository) == []


@pytest.mark.arm64
def test_arm64_build_through_qemu(registry, synthetic_base_arm64, logged_in, tmp_path):
    base = synthetic_base_arm64
    recipe = recipe_copy(tmp_path, "glm53-flash-dflash2-gb300", base=base.image, tag=base.tag, digest=base.digest)
    repository = unique_repository(registry.address, "gb300")
    report_path = tmp_path / "report.json"
    run = cli(
        "build",
        "--recipe",
        str(recipe),
        "--repository",
        repository,
        "--push",
        "--report",
        str(report_path),
        docker_config_dir=logged_in,
        timeout=3600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(report_path.read_text())
    assert (report["os"], report["architecture"], report["platform"]) == ("linux", "arm64", "linux/arm64")
    assert report["geometry_verdict"] == "pass"
    # The patch step's architecture check let the arm64 machine (qemu) through to the series.
    assert "Step 3/" in run.stderr and "patch series done" in run.stderr and "| architecture check:" not in run.stderr
    config = json.loads(docker("image", "inspect", f"{repository}:latest", text=True).stdout)[0]
    assert config["Architecture"] == "arm64"
    attestations_tag = "sha256-" + report["pushed_digest"].removeprefix("sha256:")
    # The recipe copy lies outside the repository: {rev} is the inputs' digest.
    pinned = report["tags"][1]
    assert re.fullmatch(r"sm100-gb300-20251130-x[0-9a-f]{11}", pinned), report["tags"]
    assert registry_tags(registry.address, registry.username, registry.password, repository_name(repository)) == sorted(
        ["latest", pinned, attestations_tag]
    )


def test_a_base_missing_locally_is_pulled_with_the_docker_config_credentials(
    registry, synthetic_base_amd64, logged_in, tmp_path
):
    """The base under another name, absent from the engine: refused without valid credentials, pulled with them.

    The registry copies the base's manifest as it is (skopeo, digests preserved): a `docker push` of the local
    image would give it the same digest only while the engine still knows a repository holding each layer's
    blob, and the registry of an earlier run on this machine keeps only the base repositories."""
    base = synthetic_base_amd64
    elsewhere = unique_repository(registry.address, "base")
    authfile = str(logged_in / "config.json")
    subprocess.run(
        ["skopeo", "--insecure-policy", "copy", "--quiet", "--preserve-digests",
         "--src-tls-verify=false", "--dest-tls-verify=false", "--src-authfile", authfile, "--dest-authfile", authfile,
         f"docker://{base.pinned}", f"docker://{elsewhere}:{base.tag}"],
        check=True, capture_output=True,
    )  # fmt: skip
    assert docker("image", "inspect", f"{elsewhere}@{base.digest}", check=False).returncode != 0
    recipe = recipe_copy(tmp_path, "b200-amd64", base=elsewhere, tag=base.tag, digest=base.digest)
    repository = unique_repository(registry.address, "pulled")

    wrong = docker_config(tmp_path, registry.address, registry.username, "not-the-password")
    refused = cli("build", "--recipe", str(recipe), "--repository", repository, docker_config_dir=wrong)
    assert refused.returncode == 7, refused.stderr
    assert "==> build" not in refused.stderr
    assert f"error: pull {elsewhere}:{base.tag}@{base.digest}: the registry refused the credentials" in refused.stderr

    run = cli(
        "build",
        "--recipe",
        str(recipe),
        "--repository",
        repository,
        "--json",
        "--report",
        str(tmp_path / "r.json"),
        docker_config_dir=logged_in,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    pulls = [e for e in json_events(run.stderr) if e["event"] == "pull"]
    assert pulls and any("Digest: " + base.digest in e["status"] for e in pulls)
    assert local_tags(repository) == EXPECTED_TAGS
    assert json.loads(run.stdout)["pushed_digest"] is None


@pytest.mark.arm64
def test_the_2x_gb10_recipe_builds_and_gates_on_arm64(registry, synthetic_base_arm64, tmp_path):
    """The multi-node GB10 recipe (TP2 over two nodes: the per-rank geometry, fp8_ds_mla target KV on
    family 120) builds through qemu, and the gate in the image passes it against the vLLM installed there."""
    base = synthetic_base_arm64
    recipe = recipe_copy(tmp_path, "glm53-flash-dflash2-2x-gb10", base=base.image, tag=base.tag, digest=base.digest)
    repository = unique_repository(registry.address, "gb10")
    report_path = tmp_path / "report.json"
    run = cli(
        "build",
        "--recipe",
        str(recipe),
        "--repository",
        repository,
        "--no-push",
        "--report",
        str(report_path),
        timeout=3600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(report_path.read_text())
    assert (report["platform"], report["geometry_verdict"]) == ("linux/arm64", "pass")
    gate = json.loads(
        docker(
            "run",
            "--rm",
            "--entrypoint",
            "cat",
            f"{repository}:latest",
            "/opt/glm53-overlay/geometry-report.json",
            text=True,
        ).stdout
    )
    planned = gate["report"]
    assert (planned["capability_family"], planned["tensor_parallel_size"], planned["nodes"]) == (120, 2, 2)
    assert planned["target_kv_dtype"] == "fp8_ds_mla" and gate["verdict"]["passed"] is True
