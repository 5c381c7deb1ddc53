"""The rendered Dockerfile, read as instructions rather than as bytes."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
from recipe_copies import TEST_DIGEST, copy_recipe, pinned, set_key
from support.repo import REPO

from geometry import Behaviour
from geometry.image_contract import (
    ARCHITECTURE_MISMATCH_STATUS,
    IMAGE_LABELS,
    ContractError,
    ImageLabels,
    gate_argv,
    read_image_labels,
    step_name,
)
from geometry.vllm_versions import DEFAULT_VERSION, RELEASES
from stackbuild.core.recipe import load_recipe
from stackbuild.image.plan import make_plan
from stackbuild.image.render import render, write_context


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


@pytest.fixture
def plan(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764460800")  # 2025-11-30T00:00:00Z
    return make_plan(load_recipe(copy_recipe(tmp_path, pinned)), owner="acme")


def test_from_is_the_base_by_tag_and_digest(plan):
    steps = instructions(render(plan))
    assert steps[0] == ("FROM", f"vllm/vllm-openai:v{DEFAULT_VERSION}@{TEST_DIGEST}")
    assert [w for w, _ in steps].count("FROM") == 1


def test_steps_run_in_order_and_fail_hard(plan):
    steps = instructions(render(plan))
    runs = [args for word, args in steps if word == "RUN"]
    assert len(runs) == 2
    patch, gate = runs
    # The patch step checks the machine first: on another, it exits with the contract's status
    # (which the pipeline reports as the architecture's failure) before the series is applied.
    arch, _, series = patch.partition(" fi; ")
    assert arch.startswith('machine="$(uname -m)";') and '"aarch64"' in arch
    assert f"exit {ARCHITECTURE_MISMATCH_STATUS};" in arch and "apply.py" not in arch and "mktemp" not in arch
    assert (
        "overlay/apply.py" in series and f"--series /opt/glm53-overlay/overlay/series/vllm-{DEFAULT_VERSION}" in series
    )
    # The gate runs as a module, the payload root on its path, with the command line the contract builds.
    assert (
        "env PYTHONPATH=/opt/glm53-overlay python3 -m geometry.gate_main --input /opt/glm53-overlay/gate-input.json"
        in gate
    )
    assert shlex.join(gate_argv(build=True)) in gate and "--oracle" in gate
    # No step may swallow a failure of the patch or the gate.
    for step in (patch, gate):
        assert "|| true" not in step.split("normalise-mtimes.sh")[0]
        assert "|| echo" not in step
    order = [w for w, _ in steps if w in ("FROM", "RUN", "COPY", "ENTRYPOINT", "LABEL")]
    assert order == ["FROM", "COPY", "RUN", "RUN", "ENTRYPOINT", "LABEL"]
    # Every payload in one step, before the patch step (each step costs a commit of the whole tree on the
    # containerd image store).
    copies = [args for word, args in steps if word == "COPY"]
    assert copies == ["patch-payload/ gate-payload/ preflight-payload/ /"]
    # The pre-flight runs first at start and execs `vllm serve` itself (geometry/preflight/run.py).
    entrypoint = [json.loads(args) for word, args in steps if word == "ENTRYPOINT"]
    assert entrypoint == [["python3", "/opt/glm53-overlay/geometry/preflight/entrypoint.py"]]


def test_steps_are_named_for_people(plan):
    """Progress and failures name step N of the rendered Dockerfile from the contract's step list."""
    named = (
        ("FROM ", "base image"),
        ("COPY patch-payload/ gate-payload/ preflight-payload/ /", "payload copy"),
        ("overlay/apply.py", "patch series"),
        ("-m geometry.gate_main", "geometry gate"),
        ("ENV GLM53_OVERLAY_STRICT=1", "strict overlay"),
        ("ENTRYPOINT ", "entrypoint"),
        ("LABEL ", "labels"),
    )
    steps = [f"{word} {args}" for word, args in instructions(render(plan))]
    assert len(steps) == len(named)
    for number, (instruction, (needle, name)) in enumerate(zip(steps, named), start=1):
        assert needle in instruction, (number, instruction)
        assert step_name(number) == name
    assert step_name(len(named) + 1) == f"step {len(named) + 1}"


def test_a_template_that_drifts_from_the_contract_is_refused(plan, monkeypatch):
    from geometry import image_contract
    from stackbuild.core.errors import InternalError

    monkeypatch.setattr(image_contract, "BUILD_STEPS", image_contract.BUILD_STEPS[:-1])
    with pytest.raises(InternalError, match="Dockerfile.j2: its instructions .* LABEL are not the build steps"):
        render(plan)


def label_line(plan) -> dict:
    """The rendered Dockerfile's LABEL instruction as key -> value."""
    label_args = [args for word, args in instructions(render(plan)) if word == "LABEL"]
    assert len(label_args) == 1
    labels = {}
    for key, value in re.findall(r'([\w.-]+)=("(?:[^"\\]|\\.)*")', label_args[0]):
        labels[key] = json.loads(value)
    return labels


def test_labels_present_and_derived_from_recipe(plan):
    labels = label_line(plan)
    assert labels["org.opencontainers.image.base.name"] == f"vllm/vllm-openai:v{DEFAULT_VERSION}"
    assert labels["org.opencontainers.image.base.digest"] == TEST_DIGEST
    assert labels["org.opencontainers.image.created"] == "2025-11-30T00:00:00Z"
    assert labels["org.opencontainers.image.version"] == plan.image.tags[1]
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", labels["org.opencontainers.image.revision"])
    assert labels["io.github.glm53.vllm.version"] == DEFAULT_VERSION
    assert re.fullmatch(r"[0-9a-f]{64}", labels["io.github.glm53.overlay.series.sha256"])
    assert labels["io.github.glm53.geometry.verdict"] in ("pass", "fail")
    assert labels["io.github.glm53.drafter.license"] == "CC-BY-NC-ND-4.0"
    for key in ("source", "revision", "version", "created", "base.name", "base.digest"):
        assert f"org.opencontainers.image.{key}" in labels


# The GPU releases a recipe may still pin besides the default (each with its own series).
EARLIER = sorted(v for v, r in RELEASES.items() if r.gpu_modelled and v != DEFAULT_VERSION)


@pytest.mark.parametrize("version", EARLIER)
def test_a_recipe_pinning_an_earlier_release_builds_on_it_with_its_series(tmp_path, monkeypatch, version):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764460800")

    def edit(data):
        pinned(data)
        set_key("base.tag", f"v{version}")(data)
        set_key("base.vllm_version", version)(data)
        set_key("overlay.series", f"vllm-{version}")(data)

    earlier = make_plan(load_recipe(copy_recipe(tmp_path, edit)), owner="acme")
    steps = instructions(render(earlier))
    assert steps[0] == ("FROM", f"vllm/vllm-openai:v{version}@{TEST_DIGEST}")
    patch = next(args for word, args in steps if word == "RUN")
    assert f"--series /opt/glm53-overlay/overlay/series/vllm-{version}" in patch
    assert earlier.gate_input.vllm_version == version and earlier.geometry_verdict == "pass"
    labels = label_line(earlier)
    assert labels["io.github.glm53.vllm.version"] == version
    assert labels["io.github.glm53.overlay.series"] == f"vllm-{version}"


def test_tags_and_repository(plan):
    assert plan.image.repository == "ghcr.io/acme/glm53-flash-dflash2-gb300"
    # The recipe copy lies outside the repository: {rev} is the inputs' digest, not a commit.
    assert plan.image.tags[0] == "latest"
    assert re.fullmatch(r"sm100-gb300-20251130-x[0-9a-f]{11}", plan.image.tags[1]), plan.image.tags
    assert plan.image.registry == "ghcr.io"


def test_context_carries_no_credentials_or_weights(plan, tmp_path, monkeypatch):
    ctx = write_context(plan, tmp_path / "ctx")
    files = sorted(p.relative_to(ctx).as_posix() for p in ctx.rglob("*") if p.is_file())
    assert "Dockerfile" in files
    assert "gate-payload/opt/glm53-overlay/gate-input.json" in files
    assert "gate-payload/opt/glm53-overlay/geometry/sim_glm5_drafter_hades.py" in files
    assert "patch-payload/opt/glm53-overlay/overlay/apply.py" in files
    assert "preflight-payload/opt/glm53-overlay/geometry/preflight/entrypoint.py" in files
    assert "preflight-payload/opt/glm53-overlay/preflight-checked.json" in files
    # The patch step's payload is what it runs: the applier (overlay/apply.py and the package's
    # modules, all of which it imports), every series, the mtime script.
    series = sorted(
        f"patch-payload/opt/glm53-overlay/{q.relative_to(REPO).as_posix()}"
        for q in (REPO / "overlay" / "series").rglob("*")
        if q.is_file()
    )
    applier = [f"patch-payload/opt/glm53-overlay/overlay/{q.name}" for q in (REPO / "overlay").glob("*.py")]
    assert "patch-payload/opt/glm53-overlay/overlay/__init__.py" in applier
    assert [f for f in files if f.startswith("patch-payload/")] == sorted(
        [*applier, "patch-payload/opt/glm53-overlay/normalise-mtimes.sh", *series]
    )
    assert not [f for f in files if f.endswith((".safetensors", ".bin", ".pt", "config.json"))]
    assert not [f for f in files if "docker/config" in f or f.endswith((".htpasswd", ".netrc"))]
    times = {p.stat().st_mtime for p in ctx.rglob("*")}
    assert times == {1764460800}


def test_render_cli_writes_the_same_text(tmp_path, plan, monkeypatch):
    out = tmp_path / "Dockerfile"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "build.py"),
            "render",
            "--recipe",
            str(plan.recipe.path),
            "--owner",
            "acme",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**__import__("os").environ, "SOURCE_DATE_EPOCH": "1764460800"},
    )
    assert result.returncode == 0, result.stderr
    assert out.read_text() == render(plan)


def test_dry_run_json_needs_no_daemon(plan):
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "build.py"),
            "build",
            "--dry-run",
            "--json",
            "--recipe",
            str(plan.recipe.path),
            "--owner",
            "acme",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**__import__("os").environ, "DOCKER_HOST": "unix:///nonexistent.sock", "SOURCE_DATE_EPOCH": "1764460800"},
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["tags"] == list(plan.image.tags)  # the same inputs in another process: the same tags
    assert data["registry"] == "ghcr.io"
    assert data["dockerfile"].startswith("# glm53-flash-dflash2-gb300")


def test_the_image_holds_its_labels_as_a_file_the_preflight_reads(plan, tmp_path):
    """A container cannot read its image's LABELs: the pre-flight payload carries the same mapping."""
    ctx = write_context(plan, tmp_path / "ctx")
    path = ctx / "preflight-payload" / plan.payload_dir.lstrip("/") / IMAGE_LABELS
    record = read_image_labels(str(path))
    assert record is not None and dict(record.labels) == label_line(plan)
    assert ImageLabels.from_json(record.to_json()) == record
    assert read_image_labels(str(tmp_path / "none.json")) is None


@pytest.mark.parametrize(
    "data, named",
    [
        ([], "expected a JSON object, got list"),
        ({"labels": {}, "more": 1}, "unknown key 'more'"),
        ({"labels": {"a": 1}}, "labels: a: expected a string"),
    ],
)
def test_a_malformed_labels_file_is_named(tmp_path, data, named):
    path = tmp_path / IMAGE_LABELS
    path.write_text(json.dumps(data))
    with pytest.raises(ContractError, match=named):
        read_image_labels(str(path))


def test_a_stock_build_applies_no_series_and_gates_as_stock(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764460800")
    stock = make_plan(load_recipe(copy_recipe(tmp_path, pinned)), owner="acme", behaviour=Behaviour.STOCK)
    patch, gate = [args for word, args in instructions(render(stock)) if word == "RUN"]
    # The machine is still checked; nothing is applied and no manifest is written.
    assert f"exit {ARCHITECTURE_MISMATCH_STATUS};" in patch
    assert "apply.py" not in patch and "--manifest" not in patch and "no patch series applied" in patch
    assert shlex.join(gate_argv(build=True, behaviour=Behaviour.STOCK)) in gate
    assert "--behaviour stock" in gate and "--import-patched" not in gate and "--overlay-manifest" not in gate
    assert "--verdict-failure-allowed" not in gate  # the default recipe's stock build fails at its gate
    assert stock.gate_input.vllm_behaviour == "stock" and stock.geometry_verdict == "fail"
    assert stock.labels["io.github.glm53.overlay.series"] == "none"
    # Its own repository: the patched image's tags never name a stock image.
    assert stock.image.repository == "ghcr.io/acme/glm53-flash-dflash2-gb300-stock"
    allowed = make_plan(
        load_recipe(copy_recipe(tmp_path / "b", pinned)),
        owner="acme",
        behaviour=Behaviour.STOCK,
        gate_failure_allowed=True,
    )
    (_, gate) = [args for word, args in instructions(render(allowed)) if word == "RUN"]
    assert shlex.join(gate_argv(build=True, behaviour=Behaviour.STOCK, failure_allowed=True)) in gate
    assert "--verdict-failure-allowed" in gate


def test_a_kept_gate_failure_is_never_pushed(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    r = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "build", "--recipe", str(recipe), "--owner", "acme"]
        + ["--stock", "--allow-gate-failure", "--push", "--dry-run"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --allow-gate-failure with --push: an image whose gate failed is built for comparison, never pushed"
    ]


def test_a_stock_dry_run_exits_as_its_build_would(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    argv = [sys.executable, str(REPO / "build.py"), "build", "--recipe", str(recipe), "--owner", "acme", "--dry-run"]
    refused = subprocess.run([*argv, "--stock"], capture_output=True, text=True)
    assert refused.returncode == 5, refused.stderr  # the default recipe's stock gate fails
    kept = subprocess.run([*argv, "--stock", "--allow-gate-failure"], capture_output=True, text=True)
    assert kept.returncode == 0, kept.stderr
    assert "--verdict-failure-allowed" in kept.stdout and "-stock:" in kept.stdout
