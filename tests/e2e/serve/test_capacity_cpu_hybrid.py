"""Requests at once held to live servers: `build.py qualify --capacity` against the CPU hybrid recipe's
images, stock and patched, on small pools.

The recipe (tests/recipes/cpu-hybrid-dflash, as tests/e2e/serve/test_chain_cpu_hybrid.py serves it)
with ``serving.max_model_len`` 4096 (its target's longest) and ``serving.max_num_batched_tokens`` 2048;
each image is built once (`build.py build --no-push`, the stock one with ``--stock
--allow-gate-failure``) and served by `docker run` with the recipe's own argv and
``--num-gpu-blocks-override N`` added, the start check in ``warn`` mode. For each pool and length,
`build.py geometry --lengths PROMPT:OUTPUT --num-gpu-blocks-override POOL` gives the gate's count and the
count the pool gives when each request keeps what its prefill left it; `build.py qualify --capacity
PROMPT:OUTPUT` sends the gate's count N at once, then N + 1: the server must run the N together without
a preemption and not the N + 1, each probe's peak (before any preemption) and preemptions equal to the
gate's run of the same requests (exit 0; 33 when they differ). Each image is served once, on a pool of
its own (stock 200 blocks, patched 120), and asked lengths chosen where the count after the prefill alone
is off in both directions (too high where the full-attention blocks grow while they decode and one more
is preempted; too low where the drafter's window and the mamba states shrink once a request decodes) and
where the N + 1 are stopped both ways (a preemption, one left waiting while the N run).

The lengths keep every peak for hundreds of steps (outputs of 300 and 600 tokens), so that the server's
polls resolve each peak: a 64-token output's peak holds some 60 steps, and a loaded API server answers
/metrics dozens, at times hundreds, of engine steps apart (qualify sends a probe it could not resolve again).
The preemptions come hundreds of steps before the decode ends (at steps 265 and 335 of 600; longer outputs
give the same counts and stops): the gate runs the requests in lockstep with no draft accepted, and
a server that accepts a few random drafts or admits one request a step late can run one more where the
pool is short by a block only at the end of the decode. At the stock image's lengths vLLM's own
scheduler, given the requests arriving up to 40 steps apart, runs the same peaks and stops.

Expected runtime: about 3 minutes on two cores (two image builds from the pushed CPU serving base, two
server starts of 40-50 s, eight probes of 8-30 s each).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests
from hybrid_checkpoints import write_checkpoints
from stack_e2e import cli, docker_login, recipe_copy, unique_repository

from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import serve_argv
from stackbuild.image.plan import STOCK_REPOSITORY_SUFFIX

pytestmark = pytest.mark.docker

RECIPE = "cpu-hybrid-dflash"
KEY = "capacity-test-key"
HEALTHY_WITHIN_S = 900
# behaviour -> its pool and the (prompt, output) lengths asked (the module docstring).
CASES = {
    "stock": (200, [(500, 600), (2000, 300)]),
    "overlay": (120, [(3000, 300), (300, 600)]),
}


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _edit(data: dict) -> None:
    data["serving"]["max_model_len"] = 4096  # the target's max_position_embeddings
    data["serving"]["max_num_batched_tokens"] = 2048


@pytest.fixture(scope="module")
def setup(tmp_path_factory, cpu_serving_base_pushed, registry):
    work = tmp_path_factory.mktemp("capacity")
    base = cpu_serving_base_pushed
    recipe = recipe_copy(work, RECIPE, base=base.image, tag=base.tag, digest=base.digest, edit=_edit)
    models = work / "models"
    write_checkpoints(models)
    for path in [models, *models.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    repository = unique_repository(registry.address, RECIPE + "-capacity")
    config = docker_login(work, registry)
    images = {}
    for behaviour, args in (("stock", ("--stock", "--allow-gate-failure")), ("overlay", ())):
        repo = repository + (STOCK_REPOSITORY_SUFFIX if behaviour == "stock" else "")
        r = cli(
            "build", "--recipe", str(recipe), "--repository", repository, "--no-push", *args,
            docker_config_dir=config,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        images[behaviour] = f"{repo}:latest"
    return recipe, models, images, work


def serve(image: str, recipe: Path, models: Path, pool: int):
    """The image serving the recipe's argv with ``--num-gpu-blocks-override pool``: (url, container name)."""
    port = _free_port()
    name = f"glm53-capacity-{uuid.uuid4().hex[:8]}"
    loaded = load_recipe(recipe)
    argv = [*serve_argv(loaded), "--num-gpu-blocks-override", str(pool)]
    env = {**dict(loaded.serving.env), "VLLM_API_KEY": KEY, "GLM53_PREFLIGHT": "warn"}
    run = docker(
        "run", "-d", "--name", name, "--ipc", "host", "-p", f"127.0.0.1:{port}:8000",
        *(a for k, v in env.items() for a in ("-e", f"{k}={v}")),
        "-v", f"{models / 'target'}:/models/target:ro", "-v", f"{models / 'drafter'}:/models/drafter:ro",
        image, *argv,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + HEALTHY_WITHIN_S
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=5).ok:
                return url, name
        except requests.RequestException:
            pass
        if docker("inspect", "-f", "{{.State.Running}}", name).stdout.strip() != "true":
            break
        time.sleep(3)
    logs = docker("logs", name)
    docker("rm", "-f", name)
    raise AssertionError(f"{image} did not serve with pool {pool}: {(logs.stdout + logs.stderr)[-4000:]}")


def gate_rows(recipe: Path, behaviour: str, pool: int, lengths: list) -> list[dict]:
    named = ",".join(f"{p}:{o}" for p, o in lengths)
    stock = ("--stock",) if behaviour == "stock" else ()
    r = cli(
        "geometry", "--recipe", str(recipe), "--json", *stock, "--lengths", named,
        "--num-gpu-blocks-override", str(pool),
    )  # fmt: skip
    rows = json.loads(r.stdout)["requests_sent_together"]["rows"]
    return [row for row in rows if row["behaviour"] == behaviour]


@pytest.mark.parametrize("behaviour", ["stock", "overlay"])
def test_the_live_requests_at_once_are_the_gates_count(setup, behaviour, tmp_path):
    recipe, models, images, _ = setup
    shown, stops = [], set()
    pool, lengths = CASES[behaviour]
    rows = gate_rows(recipe, behaviour, pool, lengths)
    url, name = serve(images[behaviour], recipe, models, pool)
    try:
        for (prompt, output), row in zip(lengths, rows, strict=True):
            out = tmp_path / f"{behaviour}-{pool}-{prompt}-{output}"
            stock = ("--stock",) if behaviour == "stock" else ()
            r = cli(
                "qualify", "--recipe", str(recipe), "--url", url, "--api-key-env", "LIVE_TEST_KEY", *stock,
                "--capacity", f"{prompt}:{output}", "--out", str(out), env={"LIVE_TEST_KEY": KEY},
            )  # fmt: skip
            result = json.loads((out / "capacity.json").read_text())
            n = row["requests"]
            shown.append((pool, prompt, output, n, row["after_prefill_requests"], result["live_requests_at_once"]))
            assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
            assert result["num_gpu_blocks"] == pool and result["max_model_len"] == 4096
            # The server ran the gate's N together without a preemption and not N + 1: its count is the gate's.
            assert [p["sent"] for p in result["probes"]] == [n, n + 1]
            assert [p["all_ran"] for p in result["probes"]] == [True, False], r.stderr[-3000:]
            assert result["gate_requests_at_once"] == n == result["live_requests_at_once"]
            # No probe left a peak below the gate's unresolved by its polls (qualify sends such a probe again).
            assert result["unresolved"] == [], result["unresolved"]
            # What stops the N + 1 on the server is what stops them in the gate's run: a preemption, or one
            # left waiting while the N run (no preemption).
            over = result["probes"][1]
            assert (over["live"]["preemptions"] > 0) == row["stopped_by"].startswith("a preemption"), (over, row)
            stops.add(row["stopped_by"].split(" at step")[0])
            assert (out / "capacity.png").read_bytes()[:4] == b"\x89PNG"
    finally:
        docker("rm", "-f", name)
    # Both counts, side by side: the live servers confirm the count of requests sent together, which the
    # count after the prefill alone misses in both directions among these cases.
    print(
        "\n".join(
            f"pool {p} {pr}+{o}: at once {n} (server {live}), after-prefill count {a}" for p, pr, o, n, a, live in shown
        )
    )
    assert any(n > a for *_, n, a, _ in shown) and any(n < a for *_, n, a, _ in shown), shown
    assert stops == {"a preemption", "1 left waiting"}, stops
