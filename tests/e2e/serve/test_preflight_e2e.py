"""The image's start-time pre-flight, end to end: a real build on the synthetic amd64 base, started
with `docker compose up` from the generated compose service, models mounted from a temporary
directory. The base's `vllm` stub prints the argv it receives and exits 0, so the log shows
whether vLLM was started, and with what.

The compose service is the generated one with the changes a test host needs: no GPU
reservation (no NVIDIA runtime here), no ulimits (an unprivileged engine may not raise
memlock), no published port and a kernel-cache volume of its own (other tests run at the
same time), restart "no" (the stub exits at once; "unless-stopped" would start it again
and again). Command, image, mounts and environment are the generated ones.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest
import yaml
from compose_support import require_compose_binary
from engines import FIRST, TestEngine
from infra import harness
from models_support import DRAFTER_DIR, misfit_drafter, models_dir
from stack_e2e import cli, docker_login, recipe_copy, unique_repository

from geometry.verdict.gate_run import run_gate
from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.errors import GeometryGateFailed, MountedConfigUnusable
from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import serve_argv
from stackbuild.serve.compose import compose_document
from stackbuild.serve.compose_service import SERVICE
from stackbuild.serve.image_pin import ImagePin

pytestmark = pytest.mark.docker

STUB = f"vllm stub (synthetic test base, vLLM {DEFAULT_VERSION}): "
PINNED_TAG = "sm100-b200-20251130"  # SOURCE_DATE_EPOCH of stack_e2e


@dataclass(frozen=True)
class Image:
    recipe: Path
    repository: str
    engine: TestEngine  # where it was built: compose up runs there

    @property
    def pin(self) -> ImagePin:
        return ImagePin(self.repository, PINNED_TAG, None, "")


# What `vllm serve`'s parser imports beyond the KV-cache modules the synthetic base was cut
# down to (the real vllm-openai image has it): pure Python, copied from this venv (pinned in
# pyproject.toml), so nothing is downloaded.
SERVE_CLI_DEPS = ("click",)
SERVE_CLI_DOCKERFILE = """FROM {base}
COPY deps/ /tmp/serve-cli-deps/
RUN python3 -c "import importlib.util, shutil; \\
site = importlib.util.find_spec('vllm').submodule_search_locations[0].rsplit('/', 1)[0]; \\
shutil.copytree('/tmp/serve-cli-deps', site, dirs_exist_ok=True); shutil.rmtree('/tmp/serve-cli-deps')" && \\
    VLLM_TARGET_DEVICE=cpu python3 -c "import vllm.entrypoints.cli.serve"
"""


def serve_cli_base(tmp: Path, registry, base, engine: TestEngine) -> tuple[str, str]:
    """The synthetic base plus the serve CLI's missing dependencies, built on ``engine`` and pushed to a
    repository of our own."""
    deps = tmp / "serve-cli-context" / "deps"
    for name in SERVE_CLI_DEPS:
        dist = importlib.metadata.distribution(name)
        for file in dist.files or ():
            source = Path(dist.locate_file(file))
            if "__pycache__" in file.parts or file.parts[0] == ".." or not source.is_file():
                continue
            target = deps / Path(*file.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    (deps.parent / "Dockerfile").write_text(SERVE_CLI_DOCKERFILE.format(base=base.pinned))
    repository, tag = unique_repository(registry.address, "vllm-openai-serve-cli"), base.tag
    env = engine.env(registry.env)
    for command in (["build", "-q", "-t", f"{repository}:{tag}", str(deps.parent)], ["push", f"{repository}:{tag}"]):
        run = subprocess.run(["docker", *command], capture_output=True, text=True, timeout=900, env=env)
        assert run.returncode == 0, run.stderr
    return repository, tag


def _build_image(engine: TestEngine, registry, synthetic_base, tmp: Path) -> Image:
    """The B200 test recipe built (not pushed) on ``engine`` into a repository of its own."""
    config = docker_login(tmp, registry)
    base, tag = serve_cli_base(tmp, registry, synthetic_base, engine)
    recipe = recipe_copy(tmp, "b200-amd64", base=base, tag=tag)
    env = engine.env({})
    lock = cli("lock", "--recipe", str(recipe), docker_config_dir=config, env=env)
    assert lock.returncode == 0, lock.stderr
    repository = unique_repository(registry.address, f"glm53-preflight-{engine.name}")
    build = cli("build", "--recipe", str(recipe), "--repository", repository, docker_config_dir=config, env=env)
    assert build.returncode == 0, build.stderr[-6000:]
    return Image(recipe, repository, engine)


@pytest.fixture(scope="module")
def image(docker_engine, registry, synthetic_base_amd64, tmp_path_factory) -> Image:
    """The B200 test recipe built on the first engine."""
    first = TestEngine(FIRST, None, docker_engine)
    return _build_image(first, registry, synthetic_base_amd64, tmp_path_factory.mktemp("preflight-image"))


@pytest.fixture(scope="module")
def engine_image(request, target_engine, registry, synthetic_base_amd64, tmp_path_factory) -> Image:
    """The B200 test recipe built on each test engine (the main path's start: compose up on both)."""
    if target_engine.name == FIRST:
        return request.getfixturevalue("image")
    tmp = tmp_path_factory.mktemp(f"preflight-image-{target_engine.name}")
    return _build_image(target_engine, registry, synthetic_base_amd64, tmp)


def models(tmp: Path, drafter: Optional[dict] = None) -> Path:
    return models_dir(tmp / f"models-{uuid.uuid4().hex[:6]}", drafter)


@dataclass(frozen=True)
class Run:
    exit_code: int
    lines: list[str]
    command: list[str]

    @property
    def stub_lines(self) -> list[str]:
        return [line for line in self.lines if line.startswith(STUB)]


def edited(command: list[str], flag: str, value: str) -> list[str]:
    """The command as a user edits it: the flag's value replaced where it is, else the flag added."""
    if flag in command:
        i = command.index(flag)
        return [*command[: i + 1], value, *command[i + 2 :]]
    return [*command, flag, value]


def _compose_for(engine: TestEngine) -> tuple[str, Optional[str]]:
    """The Compose binary that drives ``engine`` and the engine API the file is written for: the first engine's
    with the suite's Compose and the default health check; the second's with its own Compose v2 (Debian
    unstable's, what users run beside Docker 28) and a file written for its API (start_interval)."""
    if engine.name == FIRST:
        return require_compose_binary(), None
    return str(harness.engine28_compose_binary()), engine.client.version()["ApiVersion"]


def up(tmp: Path, image: Image, models_dir: Path, *, edit: tuple[str, ...] = (), env: Optional[dict] = None) -> Run:
    """`docker compose up` the generated service (its command ``edited`` by ``edit``, a flag and a value);
    wait for it to exit; its log."""
    binary, engine_api = _compose_for(image.engine)
    recipe = load_recipe(image.recipe)
    doc = compose_document(
        recipe, image=image.pin, models_dir=str(models_dir), gpu_reservation=False, engine_api=engine_api
    )
    service = doc["services"][SERVICE]
    project = f"preflight-{uuid.uuid4().hex[:10]}"
    service.pop("ports")
    service.pop("ulimits")
    service["restart"] = "no"
    command = edited(serve_argv(recipe), *edit) if edit else serve_argv(recipe)
    service["command"] = [a.replace("$", "$$") for a in command]
    service["environment"].update(env or {})
    doc["volumes"]["kernel-cache"]["name"] = f"{project}-kernels"
    path = tmp / f"compose-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    base = [binary, "-f", str(path), "-p", project]
    run_env = image.engine.env()
    try:
        started = subprocess.run(
            [*base, "up", "-d", "--pull", "never"], capture_output=True, text=True, timeout=300, env=run_env
        )
        assert started.returncode == 0, started.stderr
        deadline = time.monotonic() + 600
        while True:
            ps = subprocess.run(
                [*base, "ps", "-a", "--format", "json"], capture_output=True, text=True, timeout=60, env=run_env
            )
            rows = [json.loads(line) for line in ps.stdout.splitlines() if line.strip()]
            if rows and rows[0]["State"] == "exited":
                exit_code = int(rows[0]["ExitCode"])
                break
            assert time.monotonic() < deadline, f"the container did not exit: {ps.stdout}"
            time.sleep(1)
        logs = subprocess.run(
            [*base, "logs", "--no-log-prefix", "--no-color"], capture_output=True, text=True, timeout=60, env=run_env
        )
        return Run(exit_code, logs.stdout.splitlines(), command)
    finally:
        subprocess.run(
            [*base, "down", "--volumes", "--remove-orphans"], capture_output=True, text=True, timeout=300, env=run_env
        )


def expected_verdict(image: Image, drafter: Optional[dict] = None, **changes) -> bool:
    """What the build's gate says for the recipe with these values changed (host simulator)."""
    inputs = gate_input(load_recipe(image.recipe)).replace(**changes)
    if drafter is not None:
        inputs = inputs.replace(drafter_config=drafter)
    return run_gate(inputs).verdict.passed


def test_snapshot_configs_start_vllm_with_the_compose_argv(engine_image, tmp_path):
    run = up(tmp_path, engine_image, models(tmp_path))
    assert run.exit_code == 0, run.lines
    assert run.lines[0].startswith("pre-flight: PASS: the geometry the build checked (argv as built")
    # The stub prints its arguments: `serve` (the entrypoint's) and then exactly the compose command.
    assert run.lines[1:] == [STUB + " ".join(["serve", *run.command])]


def test_misfitting_drafter_stops_the_container_naming_a_drafter_layer(engine_image, tmp_path):
    run = up(tmp_path, engine_image, models(tmp_path, drafter=misfit_drafter()))
    assert run.exit_code == GeometryGateFailed.exit_code, run.lines
    assert run.lines[0].startswith("pre-flight: FAIL: re-checked (drafter config sha256 ")
    assert "drafter layer drafter.model.layers.0.self_attn.attn" in run.lines[0]
    assert "4 KV heads x head 80" in run.lines[0]
    assert run.stub_lines == []  # vLLM never started


@pytest.mark.parametrize(
    "edit,changes,drafter,shown",
    [
        (("--tensor-parallel-size", "2"), {"tensor_parallel_size": 2}, None, "tensor_parallel_size 2 (build: 1)"),
        (("--block-size", "64"), {"block_size": 64}, None, "block_size 64 (build: None)"),
        (
            ("--tensor-parallel-size", "4"),
            {"tensor_parallel_size": 4},
            misfit_drafter(),
            "tensor_parallel_size 4 (build: 1)",
        ),
    ],
    ids=["tp2", "block-size-64", "tp4-misfit-drafter"],
)
def test_edited_command_is_rechecked_and_passes_or_fails_as_the_geometry_says(
    image, tmp_path, edit, changes, drafter, shown
):
    expected = expected_verdict(image, drafter, **changes)
    run = up(tmp_path, image, models(tmp_path, drafter=drafter), edit=edit)
    assert run.command != serve_argv(load_recipe(image.recipe))
    assert run.lines[0].startswith(f"pre-flight: {'PASS' if expected else 'FAIL'}: re-checked (argv edited, {shown}"), (
        run.lines
    )
    if expected:
        assert run.exit_code == 0
        # The image's vLLM is the patched one: the simulator's overlay model is held to it.
        assert run.lines[0].endswith("the installed vLLM agrees")
        assert run.stub_lines == [STUB + " ".join(["serve", *run.command])]
    else:
        assert run.exit_code == GeometryGateFailed.exit_code
        assert run.stub_lines == []


@pytest.mark.parametrize(
    "case,message",
    [
        ("missing", "does not exist: is the checkpoint mounted there?"),
        ("directory", "is a directory, not a file"),
        ("not-json", "is not JSON (line 1: Expecting value)"),
    ],
    ids=["missing", "unreadable-directory", "not-json"],
)
def test_unusable_config_is_one_line_and_vllm_never_starts(image, tmp_path, case, message):
    root = models(tmp_path)
    config = root / DRAFTER_DIR / "config.json"
    config.unlink()
    if case == "directory":
        config.mkdir()
    elif case == "not-json":
        config.write_text("this is not JSON\n")
    run = up(tmp_path, image, root)
    assert run.exit_code == MountedConfigUnusable.exit_code
    assert run.lines == [f"pre-flight: FAIL: the drafter config /models/{DRAFTER_DIR}/config.json {message}"]


def test_warn_mode_prints_the_failure_and_starts_vllm(image, tmp_path):
    run = up(tmp_path, image, models(tmp_path, drafter=misfit_drafter()), env={"GLM53_PREFLIGHT": "warn"})
    assert run.exit_code == 0
    assert run.lines[0].startswith("pre-flight: FAIL: re-checked (drafter config sha256 ")
    assert "pre-flight: GLM53_PREFLIGHT=warn: starting vLLM anyway" in run.lines
    assert run.stub_lines == [STUB + " ".join(["serve", *run.command])]
    assert run.lines.index(run.stub_lines[0]) > run.lines.index(
        "pre-flight: GLM53_PREFLIGHT=warn: starting vLLM anyway"
    )


def test_off_mode_checks_nothing_and_starts_vllm(image, tmp_path):
    root = models(tmp_path)
    (root / DRAFTER_DIR / "config.json").unlink()  # would be exit 16 in any other mode
    run = up(tmp_path, image, root, env={"GLM53_PREFLIGHT": "off"})
    assert run.exit_code == 0
    assert run.lines == [
        "pre-flight: off (GLM53_PREFLIGHT=off): vLLM starts with a KV geometry nobody checked at start",
        STUB + " ".join(["serve", *run.command]),
    ]


def test_unknown_mode_is_refused(image, tmp_path):
    run = up(tmp_path, image, models(tmp_path), env={"GLM53_PREFLIGHT": "sometimes"})
    assert run.exit_code == 2
    assert run.lines == ["pre-flight: GLM53_PREFLIGHT='sometimes' is not one of enforce, warn, off: vLLM not started"]
