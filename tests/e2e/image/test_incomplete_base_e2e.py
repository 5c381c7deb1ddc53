"""A base the second engine (Docker 28.5, containerd image store) pulls without its layers: one line, exit 9.

Two manifests in the registry hold the same files, their layer compressed twice (gzip headers of other
times): the same diff id, other blob digests. An engine with the containerd image store that has pulled
the first has the layer unpacked, and pulling the second fetches no layer blob; it then holds the second
without its platform, and what is built FROM it has none either. `build.py build` on a recipe pinned to
the second must say so at the pull, before any step runs, and tag nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile

import pytest
from engines import ENGINE28
from signing_support import put_blob, put_manifest
from stack_e2e import cli, docker_login, json_events, recipe_copy, unique_repository

pytestmark = [pytest.mark.docker, pytest.mark.registry]

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
TAG = "incomplete"


def layer_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = b"one layer, compressed twice\n"
        info = tarfile.TarInfo("etc/glm53-incomplete-base")
        info.size, info.mtime = len(data), 1764460800
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def put_image(registry, repository: str, tar: bytes, gzip_mtime: int, tag: str) -> str:
    """The one-layer image with its layer gzipped under ``gzip_mtime``; return its manifest digest."""
    compressed = gzip.compress(tar, mtime=gzip_mtime)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/bin/true"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
            "history": [{"created": "2025-11-30T00:00:00Z", "created_by": "test_incomplete_base_e2e.py"}],
        },
        sort_keys=True,
    ).encode()
    document = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": DOCKER_CONFIG, "digest": put_blob(registry, repository, config), "size": len(config)},
        "layers": [
            {"mediaType": DOCKER_LAYER, "digest": put_blob(registry, repository, compressed), "size": len(compressed)}
        ],
    }
    return put_manifest(registry, repository, document, tag=tag)[0]


def local_images(env: dict) -> set[str]:
    listed = subprocess.run(
        ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}"], env=env, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    return set(listed.stdout.split())


@pytest.mark.parametrize("target_engine", [ENGINE28], indirect=True)
def test_a_base_pulled_without_its_layers_is_one_line_at_the_pull(target_engine, registry, tmp_path):
    repository = unique_repository(registry.address, "incomplete-base")
    tar = layer_tar()
    first = put_image(registry, repository, tar, gzip_mtime=1, tag="first")
    second = put_image(registry, repository, tar, gzip_mtime=2, tag=TAG)
    assert first != second
    env = target_engine.env(registry.env)
    config = docker_login(tmp_path, registry)
    pulled = subprocess.run(
        ["docker", "--config", str(config), "pull", "-q", f"{repository}@{first}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pulled.returncode == 0, pulled.stderr
    recipe = recipe_copy(tmp_path, "b200-amd64", base=repository, tag=TAG)
    lock = cli("lock", "--recipe", str(recipe), "--json", docker_config_dir=config, env=target_engine.env({}))
    assert lock.returncode == 0, lock.stderr
    assert json.loads(lock.stdout)["digest"] == second

    images_before = local_images(env)
    run = cli(
        "build", "--recipe", str(recipe), "--no-push", "--json", docker_config_dir=config, env=target_engine.env({})
    )

    assert run.returncode == 9, run.stderr[-3000:]
    errors = [event for event in json_events(run.stderr) if event.get("event") == "error"]
    assert [(event["type"], event["exit_code"]) for event in errors] == [("ImageIncomplete", 9)], run.stderr
    assert errors[0]["message"].startswith(
        f"pull {repository}:{TAG}@{second}: the engine holds it without its platform"
    )
    phases = [event["phase"] for event in json_events(run.stderr) if event.get("event") == "phase"]
    assert "build" not in phases, phases  # refused at the pull: no step ran
    # What the line says is the engine's state: the second image is there, its platform unknown to it.
    inspected = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", f"{repository}@{second}"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert (inspected.returncode, inspected.stdout.strip()) == (0, "/"), inspected
    assert local_images(env) == images_before  # nothing tagged
