"""The generated compose file, created (never started) on the local Docker engine.

The real image needs a registry and a GPU, so a tiny stand-in image (FROM
scratch, one dummy file, ENTRYPOINT ``vllm serve``, what the real image's pre-flight
execs with the same argv; tests/test_preflight_e2e.py starts the real one) is built
and tagged like the recipe's image. It has no registry digest, so the file
under test is generated without one (tag only). The GPU reservation stays in:
`up --no-start` records the device request without needing the NVIDIA runtime
(only starting the container would).
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import uuid

import pytest
from compose_support import NO_REPORT, SOURCE_DATE_EPOCH, recipe, require_compose_binary, unavailable

from stackbuild.core.serve_args import serve_argv, speculative_config
from stackbuild.serve.compose import render_compose
from stackbuild.serve.image_pin import resolve_image

pytestmark = pytest.mark.docker

OWNER = "composetest"


@pytest.fixture
def engine(request):
    """The suite's docker_engine fixture when it exists (tests/infra/fixtures.py), else our own client."""
    try:
        suite_engine = request.getfixturevalue("docker_engine")
    except pytest.FixtureLookupError:
        suite_engine = None
    if suite_engine is not None:
        yield suite_engine
        return
    import docker

    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means no engine
        unavailable(f"no Docker engine: {exc}")
    yield client
    client.close()


def _stand_in_image(client, reference: str) -> None:
    """FROM scratch + one dummy file, ENTRYPOINT like the real image, tagged ``reference``."""
    context = io.BytesIO()
    dockerfile = b'FROM scratch\nCOPY dummy /dummy\nENTRYPOINT ["vllm", "serve"]\n'
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("dummy", b"stand-in for the vLLM image\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=reference, rm=True)


@pytest.mark.parametrize("served_name", [None, "glm$HOME 'q' ${X}"], ids=["default-recipe", "dollar-and-quotes"])
def test_up_no_start_creates_the_container_with_the_exact_argv_and_mounts(tmp_path, monkeypatch, engine, served_name):
    binary = require_compose_binary()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
    r = recipe(
        tmp_path, (lambda d: d["serving"].__setitem__("served_model_name", served_name)) if served_name else None
    )
    pin = resolve_image(r, owner=OWNER, report_path=NO_REPORT)
    assert pin.digest is None
    models = tmp_path / "models"
    models.mkdir()
    path = tmp_path / "compose.yaml"
    path.write_text(render_compose(r, owner=OWNER, models_dir=str(models), port=18123, report_path=NO_REPORT))

    project = f"composetest-{uuid.uuid4().hex[:10]}"
    base = [binary, "-f", str(path), "-p", project]
    created_image = False
    try:
        try:
            engine.images.get(pin.reference)
        except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound
            _stand_in_image(engine, pin.reference)
            created_image = True
        up = subprocess.run([*base, "up", "--no-start", "--pull", "never"], capture_output=True, text=True, timeout=180)
        assert up.returncode == 0, up.stderr
        containers = engine.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
        assert len(containers) == 1
        attrs = engine.api.inspect_container(containers[0].id)
        config, host = attrs["Config"], attrs["HostConfig"]

        assert attrs["State"]["Status"] == "created"
        assert config["Cmd"] == serve_argv(r)  # the exact argv, one element per argument
        assert config["Entrypoint"] == ["vllm", "serve"]
        spec = config["Cmd"][config["Cmd"].index("--speculative-config") + 1]
        assert json.loads(spec) == speculative_config(r)
        assert json.loads(spec)["method"] == "dflash" and json.loads(spec)["num_speculative_tokens"] == 7
        if served_name:
            assert served_name in config["Cmd"]

        mounts = {m["Destination"]: m for m in attrs["Mounts"]}
        assert mounts["/models"]["Type"] == "bind"
        assert mounts["/models"]["Source"] == str(models)
        assert mounts["/models"]["RW"] is False
        assert mounts["/root/.cache"]["Type"] == "volume"
        assert mounts["/root/.cache"]["Name"].startswith("glm53-flash-dflash2-gb300-kernels-")
        assert mounts["/root/.cache"]["RW"] is True

        assert host["IpcMode"] == "host"
        assert {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]} == {
            "memlock": (-1, -1),
            "stack": (67108864, 67108864),
        }
        assert host["DeviceRequests"] == [
            {"Driver": "nvidia", "Count": 1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": None}
        ]
        assert host["RestartPolicy"]["Name"] == "unless-stopped"
        assert host["LogConfig"] == {"Type": "json-file", "Config": {"max-size": "100m", "max-file": "5"}}
        assert host["PortBindings"]["8000/tcp"][0]["HostPort"] == "18123"
        health = config["Healthcheck"]
        assert health["Test"][:3] == ["CMD", "python3", "-c"]
        assert health["StartPeriod"] == 30 * 60 * 10**9
        env = dict(e.split("=", 1) for e in config["Env"])
        assert env["HF_HUB_OFFLINE"] == "1"
        assert "HF_TOKEN" not in env
        assert config["Labels"]["io.github.glm53.drafter.license"] == "CC-BY-NC-ND-4.0"
    finally:
        subprocess.run([*base, "down", "--volumes", "--remove-orphans"], capture_output=True, text=True, timeout=180)
        if created_image:
            try:
                engine.images.remove(pin.reference, force=True)
            except Exception:  # noqa: BLE001 - best-effort clean-up
                pass
