"""The synthetic bases kept from one test registry to the next (tests/infra/registry_storage.py), and
how a base build knows the registry holds its image whole (tests/infra/image_publish.registry_holds),
so that it does not push it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import pytest
import requests
from stack_e2e import repository_name

pytestmark = pytest.mark.docker

INFRA = Path(__file__).resolve().parents[2] / "infra"


@pytest.fixture
def infra(monkeypatch):
    """tests/infra's scripts importable as they import each other (their directory on sys.path)."""
    monkeypatch.syspath_prepend(str(INFRA))


@pytest.fixture
def image_publish(infra):
    import image_publish

    return image_publish


@pytest.fixture
def repositories(infra) -> Path:
    """Where Distribution's filesystem driver keeps its repositories, under a storage root."""
    import registry_storage

    return registry_storage.REPOSITORIES


@pytest.fixture
def credentials(registry) -> dict:
    return {"url": registry.url, "username": registry.username, "password": registry.password}


def _repository(storage: Path, repositories: Path, name: str, *, hours_ago: float = 0.0) -> Path:
    """A repository as Distribution lays it out, last pushed to ``hours_ago``."""
    path = storage / repositories / name
    (path / "_manifests/tags/latest/current").mkdir(parents=True)
    (path / "_layers").mkdir()
    (path / "_manifests/tags/latest/current/link").write_text("sha256:0\n")
    when = time.time() - hours_ago * 3600
    for item in [path, *path.rglob("*")]:
        os.utime(item, (when, when))
    return path


def _start(storage: Path, state: Path) -> subprocess.CompletedProcess:
    """What services.sh runs when a new registry starts."""
    return subprocess.run(
        [sys.executable, str(INFRA / "registry_storage.py"), str(storage), str(state), "127.0.0.1:5000"],
        capture_output=True,
        text=True,
    )


def test_the_bases_and_the_latest_runs_repositories_are_kept(tmp_path, repositories):
    storage, state = tmp_path / "storage", tmp_path / "state"
    state.mkdir()
    for name in ("vllm/vllm-openai", "vllm/vllm-cpu"):
        _repository(storage, repositories, name, hours_ago=100)  # the bases stay whatever their age
    _repository(storage, repositories, "e2e-0123456789/cpu-hybrid", hours_ago=30)
    _repository(storage, repositories, "e2e-0123456789/other", hours_ago=30)
    _repository(storage, repositories, "lone", hours_ago=27)
    _repository(storage, repositories, "walk-0123456789/latest", hours_ago=20)  # the newest push
    records = {
        "base-amd64.json": {"repository": "127.0.0.1:5000/vllm/vllm-openai"},
        "base-serving.json": {"repository": "127.0.0.1:5000/vllm/vllm-cpu"},
        "base-elsewhere.json": {"repository": "127.0.0.1:5001/lone"},  # another registry's
        "base-broken.json": None,
    }
    for name, record in records.items():
        (state / name).write_text("{" if record is None else json.dumps(record))
    run = _start(storage, state)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (
        "kept 2 base repositories (vllm/vllm-cpu, vllm/vllm-openai) and 1 pushed to within 6 h of the newest "
        "push, dropped 3\n"
    )
    assert sorted(p.name for p in (storage / repositories).iterdir()) == ["vllm", "walk-0123456789"]
    assert not (storage / repositories / "e2e-0123456789").exists()  # the namespace went with its repositories
    assert sorted(p.name for p in (storage / repositories / "vllm").iterdir()) == ["vllm-cpu", "vllm-openai"]
    recorded = subprocess.run(
        [sys.executable, str(INFRA / "registry_storage.py"), "--recorded", str(state)], capture_output=True, text=True
    )
    assert recorded.stdout.split() == [
        "127.0.0.1:5000/vllm/vllm-cpu",
        "127.0.0.1:5000/vllm/vllm-openai",
        "127.0.0.1:5001/lone",
    ]


def test_a_run_of_a_few_tests_between_two_runs_drops_neither(tmp_path, repositories, infra):
    """Every registry start keeps what was pushed to within the window of the newest push, so the starts of
    short runs in between do not drop the last full run's repositories; what is older than the window goes."""
    import registry_storage

    storage, state = tmp_path / "storage", tmp_path / "state"
    state.mkdir()
    _repository(storage, repositories, "e2e-1111111111/full-run", hours_ago=registry_storage.RECENT_HOURS - 1)
    _repository(storage, repositories, "e2e-2222222222/a-few-tests")
    older = _repository(storage, repositories, "e2e-3333333333/older", hours_ago=registry_storage.RECENT_HOURS + 1)
    os.utime(older / "_manifests")  # as the registry's garbage collection dates a directory it deletes from
    for _ in range(2):  # a second start with nothing pushed in between keeps the same
        run = _start(storage, state)
        assert run.returncode == 0, run.stderr
    assert registry_storage.repository_names(storage) == ["e2e-1111111111/full-run", "e2e-2222222222/a-few-tests"]
    assert run.stdout.endswith("and 2 pushed to within 6 h of the newest push, dropped 0\n")


def test_no_storage_and_bad_arguments(tmp_path):
    script = str(INFRA / "registry_storage.py")
    none = subprocess.run([sys.executable, script, str(tmp_path / "absent"), str(tmp_path), "127.0.0.1:5000"])
    assert none.returncode == 0
    wrong = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True)
    assert wrong.returncode == 2, wrong.stderr
    assert wrong.stderr.splitlines() == [
        "registry_storage.py: expected STORAGE STATE_DIR ADDRESS or --recorded STATE_DIR, got 1 argument(s)"
    ]


def test_a_pushed_base_is_held_whole_under_its_digest(image_publish, credentials, registry, synthetic_base_amd64):
    base = synthetic_base_amd64
    assert image_publish.registry_holds(base.reference, credentials) == base.digest
    assert image_publish.registry_holds(f"{base.image}:no-such-tag", credentials) is None
    wrong = {**credentials, "password": "not-" + registry.password}
    assert image_publish.registry_holds(base.reference, wrong) is None


def test_a_blob_gone_from_the_repository_is_not_held(image_publish, credentials, registry, tmp_path):
    from image_archive import ImageConfig, Layer

    content = tmp_path / "hello.txt"
    content.write_text("one layer\n")
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        tar.add(content, arcname="hello.txt")
    reference = f"{registry.url}/e2e-{uuid.uuid4().hex[:10]}/kept:1"
    config = ImageConfig(arch="amd64", entrypoint=("/hello",))
    digest = image_publish.publish_image(reference, config, [Layer(layer, "one file")], credentials)
    try:
        assert image_publish.registry_holds(reference, credentials) == digest
        name = repository_name(reference.rpartition(":")[0])
        auth = (registry.username, registry.password)
        manifest = requests.get(
            f"http://{registry.url}/v2/{name}/manifests/{digest}",
            auth=auth,
            headers={"Accept": image_publish.DOCKER_MANIFEST},
            timeout=30,
        ).json()
        gone = requests.delete(
            f"http://{registry.url}/v2/{name}/blobs/{manifest['layers'][0]['digest']}", auth=auth, timeout=30
        )
        assert gone.status_code == 202, gone.text
        assert image_publish.registry_holds(reference, credentials) is None
    finally:
        subprocess.run(["docker", "rmi", "-f", reference], capture_output=True)
