"""The main job's path on both test engines: the first (services.sh's, Debian 12's Docker 20.10, classic
image store) and the second (tests/infra/engine28.sh: Docker 28.5, containerd image store).

    target_engine   session fixture, parametrized over ENGINES: a TestEngine (its DOCKER_HOST, a
                    docker-py client, the synthetic amd64 base in it)
    main_build      session fixture: the B200 test recipe built and pushed on target_engine
                    (the first engine's is the suite's amd64_build, paid once)
    on_engine       function fixture: DOCKER_HOST set to target_engine's for the test (the CLI,
                    build.py, docker-py), what the test's `docker` commands then reach

Only the main path's tests take these (build and push, the registry's digest, verify, two clean
builds, the amd64 + arm64 build pushed as one index, `docker compose up` with the start check passing
and stopping a misfit drafter, a served container measured by `qualify`); the rest of the suite runs
on the first engine. Tests of the second engine
carry ENGINE28 in their id, which tests/parallel_groups.py reads to give them a unit of their own.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from typing import Optional

import pytest
from infra import harness
from infra.fixtures import unavailable
from stack_e2e import E2EBuild, cli, docker_login, recipe_copy, unique_repository

FIRST = "engine20"
ENGINE28 = harness.ENGINE28
ENGINES = (FIRST, ENGINE28)


@dataclass(frozen=True)
class TestEngine:
    __test__ = False  # a value the tests take, not a test class
    name: str
    host: Optional[str]  # DOCKER_HOST; None: the environment's (the first engine)
    client: object  # docker.DockerClient

    def env(self, base: Optional[dict] = None) -> dict:
        """``base`` (else os.environ) with this engine's DOCKER_HOST."""
        env = dict(os.environ if base is None else base)
        if self.host:
            env["DOCKER_HOST"] = self.host
        return env


def _pull_base(engine: TestEngine, registry, base) -> None:
    """The synthetic base into the second engine, by digest, under its tag as well (as the first has it)."""
    env = engine.env(registry.env)
    for command in (["docker", "pull", "-q", base.pinned], ["docker", "tag", base.pinned, base.reference]):
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, f"{' '.join(command)} on {engine.host}: {run.stderr}"


@pytest.fixture(scope="session", params=ENGINES)
def target_engine(request, docker_engine, registry, synthetic_base_amd64):
    if request.param == FIRST:
        yield TestEngine(FIRST, None, docker_engine)
        return
    import docker

    try:
        host = harness.engine28_host()
    except harness.InfraUnavailable as exc:
        unavailable(str(exc))
    client = docker.DockerClient(base_url=host, timeout=600)
    engine = TestEngine(ENGINE28, host, client)
    _pull_base(engine, registry, synthetic_base_amd64)
    yield engine
    client.close()


@pytest.fixture
def on_engine(target_engine, monkeypatch) -> TestEngine:
    if target_engine.host:
        monkeypatch.setenv("DOCKER_HOST", target_engine.host)
    return target_engine


def _build_on(engine: TestEngine, registry, base, tmp) -> E2EBuild:
    """The B200 test recipe locked, built and pushed through the CLI on ``engine``."""
    config = docker_login(tmp, registry)
    env = engine.env({})
    recipe = recipe_copy(tmp, "b200-amd64", base=base.image, tag=base.tag)
    lock = cli("lock", "--recipe", str(recipe), "--json", docker_config_dir=config, env=env)
    assert lock.returncode == 0, lock.stderr
    assert json.loads(lock.stdout)["digest"] == base.digest
    repository = unique_repository(registry.address, f"glm53-b200-{engine.name}")
    report_path = tmp / "build-report.json"
    args = ("build", "--recipe", str(recipe), "--repository", repository, "--push", "--json")
    run = cli(*args, "--report", str(report_path), docker_config_dir=config, env=env)
    assert run.returncode == 0, run.stderr[-6000:]
    return E2EBuild(recipe, repository, config, report_path, json.loads(report_path.read_text()), run, base.digest)


@pytest.fixture(scope="session")
def main_build(request, target_engine, registry, synthetic_base_amd64, tmp_path_factory) -> E2EBuild:
    if target_engine.name == FIRST:
        return request.getfixturevalue("amd64_build")
    tmp = tmp_path_factory.mktemp(f"main-build-{target_engine.name}")
    return _build_on(target_engine, registry, synthetic_base_amd64, tmp)
