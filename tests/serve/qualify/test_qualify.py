"""`build.py qualify` without a vLLM server: its bad input (one line, the documented exit code) against
small HTTP servers that are not vLLM, and its readings of /metrics text and of output. The real server
is tests/serve/test_serving_e2e.py."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stackbuild.core.errors import EXIT_CODES
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe
from stackbuild.serve.qualify import measure, metrics
from stackbuild.serve.qualify.sanity import repeated_cycle

REPO = Path(__file__).resolve().parents[3]

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
vllm:cache_config_info{{block_size="128",engine="0"}} 1.0
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


def qualify(*args, env=None):
    import os

    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "qualify", *args],
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
    assert code in EXIT_CODES


MODELS = (200, json.dumps({"data": [{"id": "m"}]}))


def test_nothing_listens(tmp_path):
    one_line(qualify("--url", f"http://127.0.0.1:{free_port()}"), 20)


def test_not_vllm_no_openai_routes(stub):
    r = qualify("--url", stub({}))
    one_line(r, 21)
    assert "not a vLLM OpenAI server" in r.stderr


def test_not_vllm_no_counters(stub):
    r = qualify("--url", stub({"/v1/models": MODELS, "/metrics": (200, "up 1\n")}))
    one_line(r, 21)
    assert "vllm:generation_tokens_total" in r.stderr


def test_api_key_refused(stub):
    one_line(qualify("--url", stub({"/v1/models": (401, "{}")})), 22)


def test_model_not_served(stub):
    r = qualify("--url", stub({"/v1/models": MODELS}), "--model", "other")
    one_line(r, 23)
    assert "'other'" in r.stderr and "serves m" in r.stderr


def test_api_key_env_unset():
    one_line(qualify("--url", "http://127.0.0.1:1", "--api-key-env", "QUALIFY_NO_SUCH_VAR"), 2)


def test_out_dir_missing(tmp_path):
    one_line(qualify("--url", "http://127.0.0.1:1", "--out", str(tmp_path / "missing")), 15)


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
