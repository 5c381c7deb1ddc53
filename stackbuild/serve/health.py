"""The probe that says a vLLM API server can serve: one script for the compose health check
and the Kubernetes readiness probe.

vLLM's ``/health`` asks the engine (503 once the engine process is dead) and needs no API
key; ``/v1/*`` needs ``Authorization: Bearer <key>`` when vLLM was given a key (401
without). ``/v1/models`` alone answers from the API process even while the engine is dead,
so it proves only that the routes and the key work; ``/health`` alone proves the engine but
not that a client holding the key is let in. The probe asks both: ``/health``, then
``/v1/models`` with the key vLLM itself reads (``VLLM_API_KEY``) taken from the container's
environment when the probe runs, so the key is never in argv, the file, or a label.

Not a generation: a probe that generates every few seconds would add its tokens, drafts and
prefix-cache queries to the ``/metrics`` counters a measurement (``build.py qualify``) reads,
and would queue behind real requests on a busy server; ``build.py qualify`` is the check
that generates.

What it sees (the CPU-built vLLM of tests/e2e/serve/test_health_e2e.py): when the engine dies, ``/health``
answers 503 (``/v1/models`` still 200) for the few seconds before the API server exits, and
the restart policy (compose) or the kubelet starts it again. An engine that hangs without
dying still answers ``/health``; only a generation sees that.

Liveness (and Kubernetes' startup probe) is ``/health`` alone: a server that answers
``/health`` is alive even when a client's key is wrong.

The script prints one line of status codes (never the key) and exits 0 when both answer 200.
"""

from __future__ import annotations

HEALTH_PATH = "/health"
MODELS_PATH = "/v1/models"
# The variable vLLM reads its API key from when --api-key is not given.
API_KEY_VARIABLE = "VLLM_API_KEY"

_SCRIPT = """\
import os, sys, urllib.error, urllib.request
def status(path, key):
    request = urllib.request.Request('http://{host}:{port}' + path)
    if key:
        request.add_header('Authorization', 'Bearer ' + key)
    try:
        return urllib.request.urlopen(request, timeout={timeout}).status
    except urllib.error.HTTPError as error:
        return error.code
    except Exception as error:
        return type(error).__name__
health = status('{health}', None)
models = status('{models}', os.environ.get('{variable}', '')) if health == 200 else 'not asked'
print('{health}', health, '{models}', models)
sys.exit(0 if health == models == 200 else 1)
"""


def readiness_script(host: str, port: int, *, timeout_s: int = 4) -> str:
    """The Python source the probe runs (``python3 -c``): ``/health``, then ``/v1/models`` with the key.

    It holds no ``$`` (Compose interpolates it) and no ``$(`` (Kubernetes expands it).
    """
    return _SCRIPT.format(
        host=host,
        port=int(port),
        timeout=int(timeout_s),
        health=HEALTH_PATH,
        models=MODELS_PATH,
        variable=API_KEY_VARIABLE,
    )


def readiness_command(host: str, port: int, *, timeout_s: int = 4) -> list[str]:
    """The probe as an argv run inside the container (the image's python3)."""
    return ["python3", "-c", readiness_script(host, port, timeout_s=timeout_s)]
