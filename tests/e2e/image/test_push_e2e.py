"""End to end: `build.py push` against the authenticated local registry.

Credentials come only from the Docker config in DOCKER_CONFIG (a temporary
one per test); a wrong password is refused at once, a registry that is down
is reported at once (not retried), and the password never reaches the image,
the report or the logs.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from stack_e2e import (
    PAYLOAD_DIR,
    cli,
    closed_port,
    docker_config,
    local_tags,
    pushed_blobs_containing,
    registry_tags,
    remove_image_tags,
    repository_name,
    unique_repository,
)

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def error_line(run: subprocess.CompletedProcess) -> str:
    lines = [line for line in run.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_push_of_the_built_image_completes_its_report(amd64_build, tmp_path):
    built = {**amd64_build.report, "status": "built", "pushed_digest": None, "pushed_reference": None}
    report = tmp_path / "build-report.json"
    report.write_text(json.dumps(built))
    run = cli(
        "push",
        "--recipe",
        str(amd64_build.recipe),
        "--repository",
        amd64_build.repository,
        "--json",
        "--report",
        str(report),
        docker_config_dir=amd64_build.docker_config,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["pushed_digest"] == amd64_build.report["pushed_digest"]
    assert result["image_id"] == amd64_build.report["image_id"]
    completed = json.loads(report.read_text())
    assert completed["status"] == "pushed" and completed["pushed_digest"] == result["pushed_digest"]
    assert completed["pushed_reference"] == f"{amd64_build.repository}@{result['pushed_digest']}"


def test_wrong_password_is_a_clear_authentication_error(amd64_build, registry, tmp_path):
    wrong = docker_config(tmp_path, registry.address, registry.username, "not-the-password")
    run = cli(
        "push", "--recipe", str(amd64_build.recipe), "--repository", amd64_build.repository, docker_config_dir=wrong
    )
    assert run.returncode == 7, run.stderr
    line = error_line(run)
    assert "the registry refused the credentials from the Docker config" in line
    assert line.endswith(f"run `docker login {registry.address}`")
    assert "retrying" not in run.stderr  # refused credentials are final


def test_no_login_is_a_clear_authentication_error(amd64_build, tmp_path):
    empty = tmp_path / "empty-docker-config"
    empty.mkdir()
    run = cli(
        "push", "--recipe", str(amd64_build.recipe), "--repository", amd64_build.repository, docker_config_dir=empty
    )
    assert run.returncode == 7, run.stderr
    assert "no basic auth credentials" in error_line(run)


def test_push_of_an_image_never_built_is_refused(amd64_build, registry):
    repository = unique_repository(registry.address, "never-built")
    run = cli(
        "push",
        "--recipe",
        str(amd64_build.recipe),
        "--repository",
        repository,
        docker_config_dir=amd64_build.docker_config,
    )
    assert run.returncode == 9, run.stderr
    assert "no such image in the local engine; build it first" in error_line(run)
    assert registry_tags(registry.address, registry.username, registry.password, repository_name(repository)) == []


def test_registry_down_is_reported_at_once(amd64_build, registry):
    # The built image's tags under a registry that is down: nothing listens on its port.
    down = f"127.0.0.1:{closed_port()}/{repository_name(amd64_build.repository)}"
    for tag in local_tags(amd64_build.repository):
        subprocess.run(["docker", "tag", f"{amd64_build.repository}:{tag}", f"{down}:{tag}"], check=True)
    try:
        run = cli(
            "push",
            "--recipe",
            str(amd64_build.recipe),
            "--repository",
            down,
            docker_config_dir=amd64_build.docker_config,
            env={"STACKBUILD_REGISTRY_ATTEMPTS": "3", "STACKBUILD_REGISTRY_BACKOFF": "0.5"},
        )
    finally:
        remove_image_tags(down)
    assert run.returncode == 8, run.stderr
    assert "next in" not in run.stderr  # a refused connection is not retried
    line = error_line(run)
    assert "registry unreachable (not retried)" in line and "connection refused" in line


def test_the_password_is_nowhere_in_the_image_report_or_logs(amd64_build, registry, tmp_path):
    secret = registry.password.encode()
    assert len(secret) >= 16
    image = f"{amd64_build.repository}@{amd64_build.report['pushed_digest']}"
    # What a user pulls: every manifest, the config and every layer (gunzipped) of the pushed image. The
    # overlay's payload directory is there to show that the search does see into the layers.
    found = pushed_blobs_containing(
        registry.address,
        registry.username,
        registry.password,
        repository_name(amd64_build.repository),
        amd64_build.report["pushed_digest"],
        [secret, PAYLOAD_DIR.lstrip("/").encode()],
    )
    assert found[secret] == []
    assert any(where.startswith("blob ") and "tar" in where for where in found[PAYLOAD_DIR.lstrip("/").encode()]), found
    inspect = subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=True).stdout
    history = subprocess.run(["docker", "history", "--no-trunc", image], capture_output=True, check=True).stdout
    assert secret not in inspect and secret not in history
    assert secret not in amd64_build.report_path.read_bytes()
    assert secret.decode() not in amd64_build.run.stdout + amd64_build.run.stderr
