"""Helpers of the end-to-end build, push and verify tests (real engine, real registry).

Test recipes live in tests/recipes/; a test copies one into a temporary
directory, points its base at the local registry's synthetic base (by
digest) with its configs copied beside it, so no lock file or digest
is ever written into the repository. Logins go into temporary Docker
config directories; the driver only ever sees them through DOCKER_CONFIG.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import requests
import yaml
from infra import harness
from support.repo import REPO

from stackbuild.image.plan import STOCK_REPOSITORY_SUFFIX
from stackbuild.image.registry import MANIFEST_ACCEPT

TEST_RECIPES = Path(__file__).resolve().parent / "recipes"
BUILD_PY = REPO / "build.py"
SOURCE_DATE_EPOCH = "1764460800"  # 2025-11-30: tags are sm100-b200-20251130
PAYLOAD_DIR = "/opt/glm53-overlay"


def recipe_copy(
    tmp: Path,
    name: str,
    *,
    base: str,
    tag: str,
    digest: Optional[str] = None,
    edit: Optional[Callable[[dict], Any]] = None,
) -> Path:
    """tests/recipes/<name>/recipe.yaml (else recipes/<name>/) copied to ``tmp``, based on ``base:tag[@digest]``."""
    source = TEST_RECIPES / name / "recipe.yaml"
    if not source.is_file():
        source = REPO / "recipes" / name / "recipe.yaml"
    data = yaml.safe_load(source.read_text())
    directory = tmp / f"recipe-{name}"
    (directory / "configs").mkdir(parents=True, exist_ok=True)
    for key in ("target", "drafter"):
        # Config paths stay inside the recipe's directory: the configs travel with the copy.
        copied = directory / "configs" / f"{key}.config.json"
        shutil.copyfile(source.parent / data[key]["config"], copied)
        data[key]["config"] = f"configs/{copied.name}"
    data["base"]["image"], data["base"]["tag"] = base, tag
    # The tests push with --repository and no owner: the source label names the test images' repository.
    data["image"]["source"] = data["image"]["source"].replace("{owner}", "glm53-tests")
    if digest:
        data["base"]["digest"] = digest
    if edit is not None:
        edit(data)
    path = directory / "recipe.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# Repositories this session tagged or pulled images into; their local names go when it ends.
SESSION_REPOSITORIES: list[str] = []


def unique_repository(registry: str, stem: str) -> str:
    repository = f"{registry}/e2e-{uuid.uuid4().hex[:10]}/{stem}"
    SESSION_REPOSITORIES.append(repository)
    return repository


def docker_config(tmp: Path, registry: str, username: str, password: str) -> Path:
    """A Docker config directory holding what `docker login` stores for these credentials.

    Written directly (not through `docker login`, which refuses a wrong
    password) so a test can hold credentials the registry will refuse.
    """
    directory = tmp / f"docker-config-{uuid.uuid4().hex[:6]}"
    directory.mkdir(parents=True)
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    (directory / "config.json").write_text(json.dumps({"auths": {registry: {"auth": auth}}}))
    os.chmod(directory / "config.json", 0o600)
    return directory


def docker_login(tmp: Path, registry) -> Path:
    """A fresh Docker config directory, logged in with the docker CLI (password on stdin)."""
    directory = tmp / f"docker-config-{uuid.uuid4().hex[:6]}"
    directory.mkdir(parents=True)
    run = harness.docker_login(directory, harness.Credentials(registry.url, registry.username, registry.password))
    assert run.returncode == 0, f"docker login failed: {run.stderr}"
    return directory


def cli(
    *args: str, docker_config_dir: Optional[Path] = None, env: Optional[dict] = None, timeout: int = 1800
) -> subprocess.CompletedProcess:
    """``python build.py ARGS`` in a subprocess: its exit code, stdout and stderr."""
    full = {
        **os.environ,
        "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
        "STACKBUILD_REGISTRY_BACKOFF": "0.5",
        "STACKBUILD_REGISTRY_ATTEMPTS": "3",
    }
    if docker_config_dir is not None:
        full["DOCKER_CONFIG"] = str(docker_config_dir)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, str(BUILD_PY), *args], capture_output=True, text=True, env=full, timeout=timeout, cwd=str(REPO)
    )


def registry_tags(registry: str, username: str, password: str, name: str) -> list[str]:
    """GET /v2/<name>/tags/list with auth; [] when the repository does not exist yet."""
    response = requests.get(f"http://{registry}/v2/{name}/tags/list", auth=(username, password), timeout=30)
    if response.status_code == 404:
        return []
    response.raise_for_status()
    return sorted(response.json().get("tags") or [])


def pushed_blobs_containing(
    registry: str, username: str, password: str, name: str, reference: str, needles: list[bytes]
) -> dict[bytes, list[str]]:
    """For each needle, every manifest and blob of a pushed image, read back from the registry, that holds it.

    Layers are gunzipped while they stream in and searched with an overlap
    across chunk boundaries, so nothing is written to disk (``docker save``
    needs the image's size twice over: once in the daemon, once in the file).
    """
    session = requests.Session()
    session.auth = (username, password)
    found: dict[bytes, list[str]] = {needle: [] for needle in needles}
    overlap = max(len(needle) for needle in needles) - 1

    def search(data: bytes, where: str, seen: set) -> None:
        for needle in needles:
            if needle not in seen and needle in data:
                seen.add(needle)
                found[needle].append(where)

    def search_blob(blob: dict) -> None:
        inflate = zlib.decompressobj(wbits=47) if blob["mediaType"].endswith("gzip") else None
        where, seen, tail = f"blob {blob['digest']} ({blob['mediaType']})", set(), b""
        with session.get(f"http://{registry}/v2/{name}/blobs/{blob['digest']}", stream=True, timeout=60) as response:
            response.raise_for_status()
            for chunk in response.iter_content(1 << 20):
                data = tail + (inflate.decompress(chunk) if inflate else chunk)
                search(data, where, seen)
                tail = data[-overlap:] if overlap else b""

    def walk(ref: str) -> None:
        response = session.get(
            f"http://{registry}/v2/{name}/manifests/{ref}", headers={"Accept": MANIFEST_ACCEPT}, timeout=30
        )
        response.raise_for_status()
        search(response.content, f"manifest {ref}", set())
        document = response.json()
        for child in document.get("manifests", []):
            walk(child["digest"])
        for blob in ([document["config"]] if "config" in document else []) + document.get("layers", []):
            search_blob(blob)

    walk(reference)
    return found


def repository_name(repository: str) -> str:
    """``127.0.0.1:5000/a/b`` -> ``a/b``."""
    return repository.split("/", 1)[1]


def local_tags(repository: str) -> list[str]:
    run = subprocess.run(
        ["docker", "images", "--format", "{{.Tag}}", repository], capture_output=True, text=True, check=True
    )
    return sorted(t for t in run.stdout.split() if t != "<none>")


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound once, then released): a registry that is down.

    Tests never stop the shared registry: the tests running beside them on other workers use it.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def json_events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def remove_image_tags(repository: str) -> None:
    for tag in local_tags(repository):
        subprocess.run(["docker", "rmi", f"{repository}:{tag}"], capture_output=True)


def remove_local_images(repository: str) -> None:
    """Every local name of ``repository``: its tags and what was pulled by digest only."""
    remove_image_tags(repository)
    run = subprocess.run(
        ["docker", "images", "--digests", "--format", "{{.Digest}}", repository],
        capture_output=True,
        text=True,
        check=True,
    )
    for digest in sorted(set(run.stdout.split()) - {"<none>"}):
        subprocess.run(["docker", "rmi", f"{repository}@{digest}"], capture_output=True)


def registry_manifest(registry, repository: str, tag: str) -> tuple[str, dict] | None:
    """(Docker-Content-Digest, manifest) of ``repository:tag`` as the registry serves it; None if unknown."""
    response = requests.get(
        f"http://{registry.address}/v2/{repository_name(repository)}/manifests/{tag}",
        headers={"Accept": MANIFEST_ACCEPT},
        auth=(registry.username, registry.password),
        timeout=30,
    )
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return response.headers["Docker-Content-Digest"], response.json()


def tag_locally(image_id: str, repository: str, tags: list[str]) -> None:
    for tag in tags:
        subprocess.run(["docker", "tag", image_id, f"{repository}:{tag}"], check=True, capture_output=True)


def variant_of(image_id: str) -> str:
    """Another image of the same recipe: ``image_id`` plus one label (classic builder, no context, no new layer)."""
    dockerfile = f"FROM {image_id}\nLABEL org.glm53.test.variant={uuid.uuid4().hex}\n"
    run = subprocess.run(
        ["docker", "build", "-q", "-"],
        input=dockerfile.encode(),
        capture_output=True,
        check=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    variant = run.stdout.decode().split()[-1]
    assert variant.startswith("sha256:") and variant != image_id
    return variant


# ---------------------------------------------------------------- fixtures
# Imported by tests/conftest.py; built on the infra fixtures (tests/infra/fixtures.py).


@pytest.fixture(scope="session", autouse=True)
def forget_session_images():
    """Untag (and so delete) the images this session built or pulled once it ends.

    Every e2e build is tagged into a repository of its own (two tags, and its
    overlay layers on top of the shared base), a stock comparison build (`build
    --stock`) into that repository's stock sibling; on a machine whose engine
    outlives the run they would pile up run after run. Other sessions' images
    are left alone.
    """
    yield
    for repository in SESSION_REPOSITORIES:
        for name in (repository, repository + STOCK_REPOSITORY_SUFFIX):
            try:
                remove_local_images(name)
            except (OSError, subprocess.CalledProcessError) as exc:
                print(f"\n[e2e] left {name}'s images in the engine: {exc}", file=sys.stderr)
                return


@pytest.fixture
def logged_in(registry, tmp_path) -> Path:
    """A fresh temporary Docker config directory, logged in to the test registry."""
    return docker_login(tmp_path, registry)


@dataclass
class E2EBuild:
    recipe: Path
    repository: str
    docker_config: Path
    report_path: Path
    report: dict
    run: subprocess.CompletedProcess
    base_digest: str


@pytest.fixture(scope="session")
def amd64_build(registry, synthetic_base_amd64, tmp_path_factory) -> E2EBuild:
    """The B200 test recipe locked, built and pushed once for the session (through the CLI)."""
    tmp = tmp_path_factory.mktemp("amd64-build")
    base = synthetic_base_amd64
    config = docker_login(tmp, registry)
    recipe = recipe_copy(tmp, "b200-amd64", base=base.image, tag=base.tag)
    lock = cli("lock", "--recipe", str(recipe), "--json", docker_config_dir=config)
    assert lock.returncode == 0, lock.stderr
    assert json.loads(lock.stdout)["digest"] == base.digest
    repository = unique_repository(registry.address, "glm53-b200")
    report_path = tmp / "build-report.json"
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
        docker_config_dir=config,
    )
    assert run.returncode == 0, run.stderr[-6000:]
    return E2EBuild(recipe, repository, config, report_path, json.loads(report_path.read_text()), run, base.digest)


def qualify_live(
    recipe: Path, url: str, server_log: str, out: Path, api_key: str, *args: str
) -> tuple[subprocess.CompletedProcess, dict]:
    """`build.py qualify` against a live test server: its log saved beside ``out`` for ``--server-log``,
    short fixed runs, untrained weights allowed (``--allow-degenerate``); the process and its JSON."""
    log = out.parent / f"{out.name}.server.log"
    log.write_text(server_log)
    r = cli(
        "qualify", "--recipe", str(recipe), "--url", url, "--server-log", str(log),
        "--api-key-env", "LIVE_TEST_KEY", "--max-tokens", "16", "--runs", "1", "--warmup", "0",
        "--allow-degenerate", "--json", "--out", str(out), *args,
        env={"LIVE_TEST_KEY": api_key},
    )  # fmt: skip
    return r, json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
