"""An engine older than the oldest supported is refused with one line naming it, the oldest supported and
the newest tested, exit 32, before anything is pulled or built.

No engine that old runs here (the suite's engines are Docker 20.10 and 28.5, both supported), so the
old one is a stand-in on a unix socket answering what Docker 19.03 answers to the two requests a
connection makes (``GET /_ping``, ``GET /version``); whatever else it is asked fails the test.
"""

from __future__ import annotations

import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler

import pytest
from hypothesis import given
from hypothesis import strategies as st

from geometry import ExitCode
from stackbuild.core import engines
from stackbuild.core.errors import EngineTooOld
from stackbuild.image import connect as connect_mod

# Docker 19.03.15's GET /version, as that release answers it (API 1.40).
DOCKER_19_03 = {
    "Version": "19.03.15",
    "ApiVersion": "1.40",
    "MinAPIVersion": "1.12",
    "Os": "linux",
    "Arch": "amd64",
    "Components": [{"Name": "Engine", "Version": "19.03.15", "Details": {"ApiVersion": "1.40"}}],
}


class _Engine(BaseHTTPRequestHandler):
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.asked.append(self.path)
        path = self.path.split("?")[0]
        if path.endswith("/_ping"):
            body, kind = b"OK", "text/plain"
        elif path.endswith("/version"):
            body, kind = json.dumps(DOCKER_19_03).encode(), "application/json"
        else:
            self.send_error(500, "the stand-in answers /_ping and /version only")
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Api-Version", DOCKER_19_03["ApiVersion"])
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@pytest.fixture
def docker_19_03(tmp_path):
    socket_path = tmp_path / "docker-19.03.sock"
    _Engine.asked = []
    server = _UnixServer(str(socket_path), _Engine)
    server.RequestHandlerClass.address_string = lambda self: "stand-in"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"unix://{socket_path}"
    server.shutdown()
    server.server_close()
    assert all(path.split("?")[0].endswith(("/_ping", "/version")) for path in _Engine.asked), _Engine.asked


def test_connect_refuses_an_engine_older_than_the_oldest(docker_19_03, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", docker_19_03)
    with pytest.raises(EngineTooOld) as info:
        connect_mod.connect()
    message = str(info.value)
    assert "\n" not in message
    assert f"at {docker_19_03} is Docker 19.03.15 (API 1.40)" in message
    assert "oldest supported is Docker 20.10 (API 1.41)" in message
    assert "newest tested Docker 28.5 (API 1.51)" in message
    assert info.value.exit_code == ExitCode.ENGINE_TOO_OLD == 32


def test_build_on_an_engine_too_old_is_exit_32_in_one_line(docker_19_03, tmp_path):
    from stack_e2e import cli, recipe_copy

    recipe = recipe_copy(
        tmp_path, "b200-amd64", base="127.0.0.1:5000/vllm/vllm-openai", tag="v0", digest="sha256:" + "ab" * 32
    )
    run = cli("build", "--recipe", str(recipe), "--owner", "e2e", env={"DOCKER_HOST": docker_19_03})
    assert run.returncode == 32, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Docker 19.03.15 (API 1.40)" in errors[0] and "Docker 20.10 (API 1.41)" in errors[0]
    assert "Docker 28.5 (API 1.51)" in errors[0]


OLDEST = engines.api_tuple(engines.OLDEST.api)


@given(st.integers(0, 3), st.integers(0, 99))
def test_every_api_below_the_oldest_is_refused_and_none_above(major, minor):
    api = f"{major}.{minor}"
    if (major, minor) < OLDEST:
        with pytest.raises(EngineTooOld, match=rf"is Docker x \(API {api}\): the oldest supported"):
            engines.check_supported("x", api, "here")
    else:
        engines.check_supported("x", api, "here")


@given(st.text(max_size=12).filter(lambda text: engines._API_RE.match(text.strip()) is None))
def test_an_api_version_that_is_no_version_is_refused_in_one_line(api):
    with pytest.raises(EngineTooOld) as info:
        engines.check_supported("27.0", api, "here")
    assert "oldest supported is Docker 20.10" in str(info.value) and "\n" not in str(info.value)
