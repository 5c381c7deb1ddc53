"""`build.py qualify` without a vLLM server: its bad input (one line, the documented exit code) against
small HTTP servers that are not vLLM, and its readings of /metrics text and of output. The real server
is tests/e2e/serve/test_serving_e2e.py."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.repo import REPO

from geometry.errors import ExitCode
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe
from stackbuild.serve.qualify import allocation, measure, metrics, server_log
from stackbuild.serve.qualify.sanity import repeated_cycle

CPU_RECIPE = REPO / "tests" / "recipes" / "cpu-tiny" / "recipe.yaml"

METRICS = """# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {gen}
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
vllm:spec_decode_num_drafts_created{{engine="0",model_name="m"}} 1.7e9
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft_tokens}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="128",engine="0",num_gpu_blocks="8192"}} 1.0
"""


def page(**v) -> metrics.Snapshot:
    return metrics.parse(METRICS.format(**v), "test")


def test_spec_decode_from_metric_deltas():
    before = page(gen=10, drafts=5, draft_tokens=10, accepted=4, p0=3, p1=1)
    after = page(gen=110, drafts=25, draft_tokens=50, accepted=34, p0=21, p1=13)
    assert after.speculation_configured and after.block_size == 128 and after.positions() == ("0", "1")
    spec = measure.spec_decode(before, after, True)
    assert (spec.drafts, spec.draft_tokens, spec.accepted) == (20, 40, 30)
    assert spec.acceptance_rate == 0.75 and spec.mean_accepted_length == 2.5
    assert spec.accepted_per_position == (18, 12) and spec.acceptance_per_position == (0.9, 0.6)
    assert spec.per_position_sums_to_accepted


def test_metrics_without_vllm_counters_are_not_vllm():
    from stackbuild.core.errors import NotVllmServer

    with pytest.raises(NotVllmServer, match="not a vLLM server"):
        metrics.parse("# TYPE http_requests counter\nhttp_requests_total 3\n", "x")


def test_degenerate_repetition():
    assert repeated_cycle(" w0858 assistant" * 8)
    assert repeated_cycle("the " * 6)
    assert not repeated_cycle("def add(a, b):\n    return a + b\n\nprint(add(1, 2))")


def test_the_default_recipe_carries_the_posts_figures():
    q = load_recipe(DEFAULT_RECIPE).qualify
    assert (q.min_decode_tokens_per_s, q.min_acceptance) == (305, 0.54)
    assert "Source: the post" in DEFAULT_RECIPE.read_text()


class Stub(http.server.BaseHTTPRequestHandler):
    routes: dict = {}

    def do_GET(self):  # noqa: N802
        status, body = self.routes.get(self.path, (404, "not found"))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    def start(routes):
        handler = type("Routes", (Stub,), {"routes": routes})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    servers = []
    yield start
    for s in servers:
        s.shutdown()


def qualify(*args, env=None, stdin=None):
    import os

    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "qualify", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_line(r, code):
    assert r.returncode == code, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    assert ExitCode(code)


MODELS = (200, json.dumps({"data": [{"id": "m"}]}))


def test_nothing_listens(tmp_path):
    one_line(qualify("--url", f"http://127.0.0.1:{free_port()}"), 20)


def test_not_vllm_no_openai_routes(stub):
    r = qualify("--url", stub({}))
    one_line(r, 21)
    assert "not a vLLM OpenAI server" in r.stderr


def test_not_vllm_no_counters(stub):
    r = qualify("--url", stub({"/v1/models": MODELS, "/metrics": (200, "up 1\n")}), "--model", "m")
    one_line(r, 21)
    assert "vllm:generation_tokens_total" in r.stderr


def test_a_stream_the_server_ends_with_its_error_event_is_not_ready(stub):
    # vLLM's stream error (ErrorResponse: {"error": {message, type, param, code}}), as a leader whose worker
    # died sends it: the generation failed, retried until --ready-timeout, then the readiness exit.
    error = {"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError", "code": 500}}
    stream = f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n"
    counters = METRICS.format(gen=0, drafts=0, draft_tokens=0, accepted=0, p0=0, p1=0)
    tokenized = (200, json.dumps({"count": 12, "max_model_len": 1024, "tokens": list(range(12))}))
    routes = {
        "/v1/models": MODELS,
        "/metrics": (200, counters),
        "/tokenize": tokenized,
        "/v1/chat/completions": (200, stream),
    }
    r = qualify("--url", stub(routes), "--model", "m", "--ready-timeout", "1", "--allow-degenerate")
    one_line(r, 20)
    assert "the server ended the stream with an error: EngineCore encountered an issue. (code 500)" in r.stderr


def test_the_readiness_failure_names_what_failed_first_not_only_what_followed(monkeypatch):
    """A leader whose worker died: its engine ends the first generation with its error, then its API server
    exits and nothing answers, then it restarts. The exit names the engine's error first and what followed
    after it (exit 20 alone says neither: nothing answering at all is 20 too)."""
    from stackbuild.core.errors import ServerUnreachable
    from stackbuild.serve.qualify import client

    engine = "the server ended the stream with an error: EngineCore encountered an issue. (code 500)"
    gone, starting = "nothing answers (connection refused)", "HTTP 503"
    said = iter([engine, gone, gone, starting, gone, starting, starting])

    def attempt():
        raise client.Retryable(next(said))

    clock = iter(range(100))
    monkeypatch.setattr(client.time, "monotonic", lambda: next(clock))
    with pytest.raises(ServerUnreachable) as failed:
        client.wait_until(5, attempt, interval_s=0)  # seven attempts: the seventh reads 6, past the deadline
    assert (
        str(failed.value)
        == f"{engine}; then {gone}; then {starting} (still, after the readiness timeout: --ready-timeout)"
    )


def test_api_key_refused(stub):
    one_line(qualify("--url", stub({"/v1/models": (401, "{}")})), 22)


def test_model_not_served(stub):
    r = qualify("--url", stub({"/v1/models": MODELS}), "--model", "other")
    one_line(r, 23)
    assert "'other'" in r.stderr and "serves m" in r.stderr


def test_api_key_env_unset():
    one_line(qualify("--url", "http://127.0.0.1:1", "--api-key-env", "QUALIFY_NO_SUCH_VAR"), 2)


def test_api_key_env_defaults_to_vllm_api_key_when_set():
    # no --api-key-env and VLLM_API_KEY unset: no key, and on to the server (nothing listens: 20)
    r = qualify("--url", "http://127.0.0.1:1", env={"VLLM_API_KEY": ""})
    one_line(r, 20)


def test_out_dir_is_made_when_missing_but_not_under_a_file(tmp_path):
    # a missing --out is fine (made when the result is written; nothing is, as nothing listens)
    one_line(qualify("--url", "http://127.0.0.1:1", "--out", str(tmp_path / "new" / "dir")), 20)
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("")
    r = qualify("--url", "http://127.0.0.1:1", "--out", str(tmp_path / "file" / "dir"))
    one_line(r, 15)
    assert "--out" in r.stderr and "not a directory" in r.stderr


def test_server_log_unusable(tmp_path):
    r = qualify("--url", "http://127.0.0.1:1", "--server-log", str(tmp_path / "none.log"))
    one_line(r, 2)
    assert "--server-log" in r.stderr and "no such file" in r.stderr
    log = tmp_path / "other.log"
    log.write_text("INFO starting something that is not vLLM\n")
    r = qualify("--url", "http://127.0.0.1:1", "--server-log", "-", stdin=log.read_text())
    one_line(r, 2)
    assert "--server-log stdin" in r.stderr and "KV cache size" in r.stderr


def test_bad_qualify_key(tmp_path):
    import shutil

    src = DEFAULT_RECIPE.parent
    shutil.copytree(src, tmp_path / "r")
    path = tmp_path / "r" / "recipe.yaml"
    path.write_text(path.read_text().replace("min_acceptance: 0.54", "min_acceptance: 54"))
    r = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "qualify", "--url", "http://127.0.0.1:1", "--recipe", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    one_line(r, 2)
    assert "qualify.min_acceptance" in r.stderr


# ---------------------------------------------------------------- the server's log and the gate's figures


def vllm_log_formats() -> tuple[str, str]:
    """vLLM's own format strings of its two allocation lines, read from the installed vLLM's
    v1/core/kv_cache_utils.py (0.33.0 here; 0.32.0 logs the same lines)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("vllm")
    if spec is None:
        from infra.fixtures import unavailable

        unavailable("vLLM is not installed for this interpreter")
    source = (Path(spec.origin).parent / "v1" / "core" / "kv_cache_utils.py").read_text()
    groups = re.search(r'logger\.info_once\("(kv cache group sizes %s)"', source)
    size = re.search(
        r'"(%s KV cache size: %s tokens, )"\s*"(Maximum concurrency for %s tokens per request: %\.2fx)"', source
    )
    assert groups and size, "vLLM's allocation log lines changed: read kv_cache_utils.py again"
    return groups[1], size[1] + size[2]


@given(
    sizes=st.lists(st.sampled_from([16, 32, 64, 128, 256, 512, 1024, 2048]), min_size=2, max_size=6),
    blocks=st.integers(1, 10**7),
    per_request=st.integers(1, 64),
    pool=st.sampled_from(["GPU", "CPU", "XPU", "GPU + host"]),
    prefix=st.sampled_from(["", "vllm-1  | ", "(EngineCore pid=7) INFO 12-02 01:44:33 [kv_cache_utils.py:2327] "]),
)
@settings(max_examples=60, deadline=None)
def test_server_log_reads_vllms_own_lines(sizes, blocks, per_request, pool, prefix):
    group_format, size_format = vllm_log_formats()
    max_len = per_request * 128
    tokens = int(blocks / per_request * max_len)
    earlier = prefix + size_format % (pool, f"{tokens + 1:,}", f"{max_len:,}", blocks / per_request)
    text = "\n".join(
        [
            earlier,  # an earlier start of the same server: the last lines are the running one's
            prefix + group_format % (tuple(sizes),),
            prefix + size_format % (pool, f"{tokens:,}", f"{max_len:,}", blocks / per_request),
            "INFO Application startup complete.",
        ]
    )
    got = server_log.parse(text, "x.log")
    assert got.group_block_sizes == tuple(sizes) and got.kv_cache_tokens == tokens and got.pool == pool


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=300))
@settings(max_examples=80, deadline=None)
def test_server_log_without_the_size_line_is_refused(text):
    from stackbuild.core.errors import UsageError

    if "KV cache size:" in text:
        return
    with pytest.raises(UsageError) as exc:
        server_log.parse(text, "x.log")
    assert exc.value.exit_code == 2 and "--server-log x.log" in str(exc.value) and "\n" not in str(exc.value)


def cpu_tiny_prediction():
    from stackbuild.core.gate import recipe_geometry

    recipe = load_recipe(CPU_RECIPE)
    return allocation.predict(recipe, recipe_geometry(recipe, vllm_behaviour="stock"))


def test_the_gates_figures_for_the_cpu_recipe():
    p = cpu_tiny_prediction()
    config = json.loads((CPU_RECIPE.parent / "configs" / "target.config.json").read_text())
    # 1 GiB (geometry.kv_cache_memory_gib) in blocks of 128 tokens of 2 (K, V) x heads x head_dim bf16 per layer
    per_block = config["num_hidden_layers"] * 2 * config["num_key_value_heads"] * config["head_dim"] * 2 * 128
    assert (p.num_gpu_blocks, p.block_size, p.group_block_sizes) == (1024**3 // per_block, 128, (128,))
    assert p.kv_cache_tokens == p.num_gpu_blocks * 128 and p.behaviour == "stock"


def test_a_served_kv_cache_other_than_the_gates_names_both_numbers():
    p = cpu_tiny_prediction()
    log = server_log.LoggedAllocation("x.log", None, p.kv_cache_tokens * 2, "CPU")
    same = allocation.check(p, ({"block_size": "128", "num_gpu_blocks": str(p.num_gpu_blocks)},), None)
    assert same.differences == () and all(f.matches for f in same.figures)
    other = allocation.check(p, ({"block_size": "128", "num_gpu_blocks": str(p.num_gpu_blocks - 1)},), log)
    where = f"(recipe {CPU_RECIPE}, vLLM {load_recipe(CPU_RECIPE).base.vllm_version} stock)"
    assert other.differences == (
        f"served num_gpu_blocks {p.num_gpu_blocks - 1:,} != gate {p.num_gpu_blocks:,} {where}",
        f"served kv_cache_tokens {p.kv_cache_tokens * 2:,} != gate {p.kv_cache_tokens:,} {where}",
    )
    # a second engine with fewer blocks counts; an engine without the label is reported as such
    two = allocation.check(
        p, ({"block_size": "128", "num_gpu_blocks": str(p.num_gpu_blocks)}, {"block_size": "128"}), None
    )
    assert two.differences[0].startswith("the server reports no num_gpu_blocks (/metrics)")


def test_a_server_of_another_model_than_the_recipes_is_one_line(stub):
    cards = (200, json.dumps({"data": [{"id": "other", "max_model_len": 4096}]}))
    r = qualify("--url", stub({"/v1/models": cards}), "--recipe", str(CPU_RECIPE), "--stock")
    one_line(r, 23)
    assert "does not serve model 'tiny' (it serves other): the recipe's serving.served_model_name" in r.stderr


def test_the_model_and_its_max_model_len_from_one_models_answer(stub):
    from stackbuild.serve.qualify.client import ServedModel, Server

    cards = {"data": [{"id": "a", "max_model_len": 4096}, {"id": "b"}, {"id": "c", "max_model_len": True}]}
    server = Server(stub({"/v1/models": (200, json.dumps(cards))}))
    assert server.served_model("a") == ServedModel("a", 4096)
    assert server.served_model("b") == ServedModel("b", None)  # none given: nothing sized
    assert server.served_model("c") == ServedModel("c", None)  # not an integer
    assert server.max_model_len("a") == 4096 and server.max_model_len("z") is None


def test_a_baseline_result_of_another_model_is_one_line_before_anything_is_measured(stub, tmp_path):
    from test_result_file import sample

    from stackbuild.serve.qualify import result_file

    path = result_file.write(sample(model="other"), tmp_path / "base.json")
    # the stub has no /metrics: a measurement would stop there (exit 21); the file's model is refused first
    r = qualify("--url", stub({"/v1/models": MODELS}), "--model", "m", "--baseline-result", str(path))
    one_line(r, 2)
    assert f"--baseline-result {path}: model: 'other', but " in r.stderr and "serves 'm'" in r.stderr
