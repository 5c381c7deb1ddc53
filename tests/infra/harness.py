"""What the tests need to know about the test services (tests/infra/services.sh)
and the synthetic bases (tests/infra/build_base.py).

    registry_url()          "127.0.0.1:5000"
    registry_credentials()  Credentials(url, username, password), read from the 0600 state file
    base_image(arch)        SyntheticBase for "amd64", "arm64" or "wrong-version"
    wait_for_base(name)     block while run-tests.sh still builds that base in the background
    docker_client()         a docker-py client (raises if no daemon answers)
    engine28_host()         DOCKER_HOST of the second engine (engine28.sh: Docker 28, containerd store)

State dir: $INFRA_STATE_DIR (default: services.sh's).  Nothing here
prints or logs the password; Credentials' repr hides it.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
SERVICES = HERE / "services.sh"
BUILD_BASE = HERE / "build_base.py"
# The CPU serving base in the local engine (tests/infra/serving_base.py builds it).
CPU_SERVING_IMAGE = "glm53-test/vllm-cpu-serve:0.32.0"
# Where the base builds keep what they download and make, each file under a key of its inputs.
CACHE_DIR = Path(os.environ.get("INFRA_CACHE_DIR", str(HERE.parent.parent / ".cache" / "infra")))


def state_dir() -> Path:
    """$INFRA_STATE_DIR, else the default services.sh keeps its state in (its `env` command)."""
    if os.environ.get("INFRA_STATE_DIR"):
        return Path(os.environ["INFRA_STATE_DIR"])
    return _default_state_dir()


@functools.lru_cache(maxsize=1)
def _default_state_dir() -> Path:
    out = subprocess.run(["bash", str(SERVICES), "env"], capture_output=True, text=True, check=True).stdout
    return Path(dict(line.split("=", 1) for line in out.splitlines() if "=" in line)["INFRA_STATE_DIR"])


class InfraUnavailable(RuntimeError):
    """A test service or a synthetic base is not there (run services.sh up / build_base.sh)."""


@dataclass(frozen=True)
class Credentials:
    url: str
    username: str
    password: str = field(repr=False)

    # same names the e2e helpers use
    @property
    def address(self) -> str:
        return self.url

    def __iter__(self):  # url, username, password = registry_credentials()
        return iter((self.url, self.username, self.password))


class SyntheticBase(dict):
    """The pushed base as a dict ({"reference","digest","arch",...}) with attribute access.

    reference        127.0.0.1:5000/vllm/vllm-openai:v0.33.0-amd64 (tag in the local engine too)
    image, tag       127.0.0.1:5000/vllm/vllm-openai, v0.33.0-amd64
    digest           sha256:... of the pushed manifest
    pinned           image@digest
    local_reference  the tag in the local engine (same as reference)
    """

    def __getattr__(self, name: str):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def local_reference(self) -> str:
        return self["reference"]


def registry_url() -> str:
    path = state_dir() / "credentials.json"
    if path.exists():
        try:
            return json.loads(path.read_text())["url"]
        except (ValueError, KeyError):
            pass
    return os.environ.get("INFRA_REGISTRY_ADDR", "127.0.0.1:5000")


def registry_credentials() -> Credentials:
    path = state_dir() / "credentials.json"
    if not path.exists():
        raise InfraUnavailable(f"no registry credentials at {path}: run tests/infra/services.sh up")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise InfraUnavailable(f"{path} has mode {mode:o}; expected 0600")
    data = json.loads(path.read_text())
    return Credentials(data["url"], data["username"], data["password"])


def registry_up() -> bool:
    """True when the registry answers on /v2/ (401 without credentials counts)."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"http://{registry_url()}/v2/", timeout=5)
        return True
    except urllib.error.HTTPError as exc:
        return exc.code in (401, 200)
    except OSError:
        return False


# run-tests.sh builds the bases in the background while the tests that need none run. For each
# base NAME (amd64, wrong-version, arm64, serving) it keeps in BASE_JOBS_DIR: NAME.pending
# (the building job's pid) while it builds, then NAME.rc (its exit status) and NAME.log.
BASE_JOBS_DIR = "base-jobs"
BASE_WAIT_SECONDS = 3600


def wait_for_base(name: str, poll_seconds: float = 2.0) -> None:
    """Return once base NAME is built (at once when no background build of it is known).

    Raises InfraUnavailable when its build failed, or its job died without saying how it ended.
    """
    import time

    jobs = state_dir() / BASE_JOBS_DIR
    pending, rc, log = (jobs / f"{name}.{ext}" for ext in ("pending", "rc", "log"))
    deadline = time.monotonic() + BASE_WAIT_SECONDS
    while pending.exists() and not rc.exists():
        try:
            os.kill(int(pending.read_text().strip()), 0)
        except (ValueError, ProcessLookupError, FileNotFoundError):
            if rc.exists():
                break
            raise InfraUnavailable(f"the background build of the {name} base is gone without an exit status ({log})")
        except PermissionError:
            pass  # alive, another user's
        if time.monotonic() > deadline:
            raise InfraUnavailable(f"the {name} base is still building after {BASE_WAIT_SECONDS} s ({log})")
        time.sleep(poll_seconds)
    if rc.exists() and rc.read_text().strip() != "0":
        tail = log.read_text(errors="replace").splitlines()[-20:] if log.exists() else []
        raise InfraUnavailable(
            f"the {name} base build failed (exit {rc.read_text().strip()}, {log}):\n" + "\n".join(tail)
        )


def base_ready(name: str) -> bool:
    """Whether a test needing base NAME would start now: no background build of it is known or
    running (a failed one counts: its tests fail at once, with its log)."""
    jobs = state_dir() / BASE_JOBS_DIR
    return not (jobs / f"{name}.pending").exists() or (jobs / f"{name}.rc").exists()


def base_image(arch: str) -> SyntheticBase:
    """The pushed synthetic base for arch ("amd64", "arm64" or "wrong-version")."""
    path = state_dir() / f"base-{arch}.json"
    if not path.exists():
        raise InfraUnavailable(
            f"no synthetic base {arch!r} ({path} missing): run tests/infra/build_base.sh "
            + ("--wrong-version" if arch == "wrong-version" else f"--arch {arch}")
        )
    return SyntheticBase(json.loads(path.read_text()))


# The second test engine (tests/infra/engine28.sh): its state directory, and its name as a background
# job of run-tests.sh (waited for like a base).
ENGINE28 = "engine28"
ENGINE28_SCRIPT = HERE / "engine28.sh"


def engine28_dir() -> Path:
    return state_dir() / ENGINE28


def engine28_host() -> str:
    """DOCKER_HOST of the second engine; InfraUnavailable when it does not answer there."""
    wait_for_base(ENGINE28)
    socket = engine28_dir() / "docker.sock"
    host = f"unix://{socket}"
    import docker

    try:
        docker.DockerClient(base_url=host, timeout=10).ping()
    except Exception as exc:  # noqa: BLE001 - any failure means it does not answer
        raise InfraUnavailable(
            f"the second engine does not answer at {host} ({exc}): run tests/infra/engine28.sh up"
        ) from None
    return host


def engine28_compose_binary() -> Path:
    """Compose v2 (Debian unstable's docker-compose) from the second engine's rootfs; it runs on the host."""
    return engine28_dir() / "root" / "usr" / "libexec" / "docker" / "cli-plugins" / "docker-compose"


def docker_client(timeout: int = 300):
    """docker-py client from the environment (DOCKER_HOST or the default socket); pinged."""
    import docker

    client = docker.from_env(timeout=timeout)
    try:
        client.ping()
    except Exception:
        client.close()
        raise
    return client


def services(command: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run services.sh COMMAND (e.g. "registry-stop", "registry-start", "status")."""
    return subprocess.run(["bash", str(SERVICES), command], capture_output=True, text=True, check=check)


def docker_login(config_dir: Path, creds: Optional[Credentials] = None) -> subprocess.CompletedProcess:
    """`docker --config CONFIG_DIR login` with the password on stdin; returns the result."""
    creds = creds or registry_credentials()
    return subprocess.run(
        ["docker", "--config", str(config_dir), "login", creds.url, "-u", creds.username, "--password-stdin"],
        input=creds.password,
        capture_output=True,
        text=True,
        timeout=120,
    )
