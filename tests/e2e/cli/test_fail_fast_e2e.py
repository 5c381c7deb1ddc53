"""`build.py lock` without a registry that answers fails within seconds: a refused connection or a
name that does not resolve is said at once, and transient errors are retried with the attempt and
the wait on stderr, all within the lock's bound (stackbuild/core/lock.py LOCK_DEADLINE_SECONDS)."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time

import pytest
from recipe_copies import copy_recipe, set_key
from stack_e2e import closed_port
from support.repo import REPO

from stackbuild.core.lock import LOCK_DEADLINE_SECONDS

pytestmark = [pytest.mark.docker]

GENEROUS = 10  # seconds: the bound is the product's 3 s; a shared, busy machine gets some room


def lock(recipe, **env) -> tuple[subprocess.CompletedProcess, float]:
    import os

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "lock", "--recipe", str(recipe)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={k: v for k, v in {**os.environ, **env}.items() if not k.startswith("STACKBUILD_REGISTRY_")},
    )
    return done, time.monotonic() - started


def test_the_bound_is_three_seconds():
    assert LOCK_DEADLINE_SECONDS == 3


@pytest.mark.parametrize(
    "image, says",
    [
        (f"127.0.0.1:{closed_port()}/acme/base", "connection refused"),
        ("registry.invalid/acme/base", "registry.invalid"),
    ],
    ids=["closed-port", "unresolvable-name"],
)
def test_lock_without_a_registry_fails_at_once(docker_engine, tmp_path, image, says):
    recipe = copy_recipe(tmp_path, set_key("base.image", image))
    done, seconds = lock(recipe)
    assert done.returncode == 8, done.stderr
    assert seconds < GENEROUS, seconds
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "registry unreachable (not retried)" in lines[0] and says in lines[0]
    assert not (recipe.parent / "recipe.lock.json").exists()


class _Unavailable(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server name
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


def test_lock_retries_a_transient_error_within_the_bound(docker_engine, tmp_path):
    """A registry that answers 503: each retry says its attempt and the wait, and lock gives up in time."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        recipe = copy_recipe(tmp_path, set_key("base.image", f"127.0.0.1:{server.server_port}/acme/base"))
        done, seconds = lock(recipe)
    finally:
        server.shutdown()
    assert done.returncode == 8, done.stderr
    assert seconds < GENEROUS, seconds
    *retries, error = done.stderr.strip().splitlines()
    # Default backoff 2 s: one wait fits in 3 s, the next (4 s) would not.
    assert len(retries) == 1 and retries[0].strip().endswith("(attempt 1/5, next in 2s)"), done.stderr
    assert "503" in retries[0]
    assert error.startswith("error: ") and "registry unavailable after 2 attempts" in error
