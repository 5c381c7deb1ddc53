"""`compose --engine-api` against the two test engines: the file's health check follows the API it is written
for, and the engine it targets is checked (Docker 20.10, API 1.41, refuses start_interval; Docker 28.5 takes it)."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from compose_support import DIGEST, recipe
from infra import harness
from infra.fixtures import unavailable
from stack_e2e import cli

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def engine28_host() -> str:
    try:
        return harness.engine28_host()
    except harness.InfraUnavailable as exc:
        unavailable(str(exc))


def _compose(tmp_path, *args, env=None):
    r = recipe(tmp_path)
    out = tmp_path / "out.compose.yaml"
    run = cli("compose", "--recipe", str(r.path), "--digest", DIGEST, "-o", str(out), *args, env=env)
    return run, out


def test_written_for_1_44_is_refused_by_the_first_engine_in_one_line(docker_engine, tmp_path):
    api = docker_engine.version()["ApiVersion"]
    run, out = _compose(tmp_path, "--engine-api", "1.44")
    assert run.returncode == 32, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"(API {api}), older than the API the file would be written for" in errors[0]
    assert not out.exists()


def test_auto_on_the_second_engine_writes_start_interval_and_compose_v2_reads_it(engine28_host, tmp_path):
    run, out = _compose(tmp_path, "--engine-api", "auto", env={"DOCKER_HOST": engine28_host})
    assert run.returncode == 0, run.stderr
    text = out.read_text()
    health = yaml.safe_load(text)["services"]["vllm"]["healthcheck"]
    assert health["start_interval"] == "5s" and health["start_period"] == "30m"
    assert "# Written for Docker Engine API 1.51 (compose --engine-api)" in text
    # Debian unstable's Compose v2 against that engine reads the key (it refuses it below API 1.44).
    config = subprocess.run(
        [str(harness.engine28_compose_binary()), "-f", str(out), "config", "--format", "json"],
        capture_output=True,
        text=True,
        env={"DOCKER_HOST": engine28_host, "IMAGE_OWNER": "e2e", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert config.returncode == 0, config.stderr
    assert '"start_interval": "5s"' in config.stdout
