"""The engine layer's own rules, checked without a daemon: stream errors, step names,
registry error classes, retries, progress events, and a dead DOCKER_HOST."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time

import pytest
from recipe_copies import REPO

from geometry.image_contract import ContractError
from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.errors import EngineUnavailable, PushError, RegistryAuthError, RegistryUnavailable
from stackbuild.image import engine as engine_mod
from stackbuild.image.engine import RegistryTransient, classify_registry_error, registry_retry
from stackbuild.image.progress import Progress
from stackbuild.image.report import geometry_verdict


def test_a_failed_run_step_says_its_exit_status():
    """The classic builder's error message carries the status twice; either is read, nothing else is a status."""
    text = "The command '/bin/sh -c exit 86' returned a non-zero code: 86"
    assert engine_mod._exit_status({"errorDetail": {"code": 86, "message": text}, "error": text}) == 86
    assert engine_mod._exit_status({"error": text}) == 86
    assert (
        engine_mod._exit_status(
            {"errorDetail": {"message": "COPY failed: no such file"}, "error": "COPY failed: no such file"}
        )
        is None
    )


def test_errors_inside_a_stream_are_found():
    assert engine_mod._stream_error({"stream": "Step 1/2 : FROM x"}) is None
    assert engine_mod._stream_error({"status": "Pushing", "id": "abc"}) is None
    assert (
        engine_mod._stream_error({"errorDetail": {"message": "denied: nope"}, "error": "denied: nope"})
        == "denied: nope"
    )
    assert engine_mod._stream_error({"errorDetail": {"message": "only detail"}}) == "only detail"


@pytest.mark.parametrize(
    "message, kind",
    [
        ("unauthorized: authentication required", RegistryAuthError),
        ("no basic auth credentials", RegistryAuthError),
        ("denied: requested access to the resource is denied", PushError),
        ("manifest unknown: manifest unknown", PushError),
        ('Get "http://127.0.0.1:5000/v2/": dial tcp 127.0.0.1:5000: connect: connection refused', RegistryUnavailable),
        (
            'Get "https://registry.invalid/v2/": dial tcp: lookup registry.invalid on 10.0.0.53:53: no such host',
            RegistryUnavailable,
        ),
        ("registry.invalid: [Errno -2] name or service not known", RegistryUnavailable),
        ("registry.invalid: [Errno -3] temporary failure in name resolution", RegistryUnavailable),
        ("net/http: TLS handshake timeout", RegistryTransient),
        ("received unexpected HTTP status: 503 Service Unavailable", RegistryTransient),
        ("toomanyrequests: slow down", RegistryTransient),
        ("something nobody has seen", PushError),
    ],
)
def test_registry_errors_are_classified(message, kind):
    assert type(classify_registry_error("push x", message)) is kind


def test_an_unreachable_registry_is_reported_at_once(monkeypatch):
    """A refused connection or a name that does not resolve: one attempt, no retry line."""
    monkeypatch.setenv("STACKBUILD_REGISTRY_BACKOFF", "0.01")
    calls, retries = [], []

    def refused():
        calls.append(1)
        raise classify_registry_error("push x", "dial tcp 127.0.0.1:9: connect: connection refused")

    with pytest.raises(
        RegistryUnavailable, match=r"^push x: registry unreachable \(not retried\): .*connection refused$"
    ):
        registry_retry("push x", retries.append)(refused)
    assert calls == [1] and retries == []


def test_a_deadline_starts_no_wait_that_ends_after_it(monkeypatch):
    monkeypatch.setenv("STACKBUILD_REGISTRY_ATTEMPTS", "10")
    monkeypatch.setenv("STACKBUILD_REGISTRY_BACKOFF", "0.2")
    calls = []

    def down():
        calls.append(time.monotonic())
        raise RegistryTransient("lock x", "503 Service Unavailable")

    started = time.monotonic()
    with pytest.raises(RegistryUnavailable, match=r"after 3 attempts"):
        registry_retry("lock x", deadline=1.0)(down)  # waits 0.2, 0.4; the next (0.8) would end after 1 s
    assert len(calls) == 3 and time.monotonic() - started < 1.0


def test_a_retry_says_which_attempt_and_the_wait():
    stream = io.StringIO()
    Progress(stream=stream).retry_event(
        {
            "event": "retry",
            "what": "push x",
            "attempt": 2,
            "of": 5,
            "wait_seconds": 4.0,
            "error": "503 Service Unavailable",
        }
    )
    assert stream.getvalue() == "    push x: 503 Service Unavailable (attempt 2/5, next in 4s)\n"


def test_transient_errors_are_retried_then_reported(monkeypatch):
    monkeypatch.setenv("STACKBUILD_REGISTRY_ATTEMPTS", "3")
    monkeypatch.setenv("STACKBUILD_REGISTRY_BACKOFF", "0.01")
    calls, retries = [], []

    def down():
        calls.append(1)
        raise RegistryTransient("push x", "connection refused")

    with pytest.raises(
        RegistryUnavailable, match=r"^push x: registry unavailable after 3 attempts: connection refused$"
    ):
        registry_retry("push x", retries.append)(down)
    assert len(calls) == 3 and [r["attempt"] for r in retries] == [1, 2]


@pytest.mark.parametrize("error", [RegistryAuthError("push x: refused"), PushError("push x: denied")])
def test_final_errors_are_not_retried(monkeypatch, error):
    monkeypatch.setenv("STACKBUILD_REGISTRY_BACKOFF", "0.01")
    calls = []

    def final():
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        registry_retry("push x")(final)
    assert calls == [1]


def test_gate_verdict_is_read_from_its_report():
    """One shape, the gate's (geometry/image_contract.py GateReport): anything else is an error naming the key."""
    written = {
        "report": {"behaviour": "overlay"},
        "verdict": {"passed": False, "reasons": ["x"]},
        "oracle": {"agrees": True, "differences": [], "source": "record"},
    }
    assert geometry_verdict(written) == "fail"
    assert geometry_verdict({**written, "verdict": {"passed": True, "reasons": []}}) == "pass"
    for shape, key in (
        ({"verdict": "pass"}, "report"),
        ({"gate": {"verdict": "fail"}}, "gate"),
        ({"passed": True}, "passed"),
        ({"report": {}, "verdict": {"passed": "yes"}}, "passed"),
        ({**written, "oracle": {"agrees": True, "differences": [], "source": "guess"}}, "source"),
    ):
        with pytest.raises(ContractError, match=key):
            geometry_verdict(shape)


def test_progress_json_lines_time_each_step():
    out = io.StringIO()
    progress = Progress(json_lines=True, stream=out)
    with progress.phase("build"):
        progress.build_event({"step": 3, "total": 9, "instruction": "RUN python3 /x/overlay/apply.py"})
        progress.build_event({"output": "applied 3 patches"})
        progress.build_event({"step": 9, "total": 9, "instruction": "LABEL a=b"})
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    kinds = [(e["event"], e.get("name") or e.get("phase")) for e in events]
    assert kinds == [
        ("phase", "build"),
        ("step", "patch series"),
        ("output", None),
        ("step_done", "patch series"),
        ("step", "labels"),
        ("step_done", "labels"),
        ("phase", "build"),
    ]
    assert events[2]["line"] == "applied 3 patches" and events[2]["step"] == 3
    assert events[-1]["status"] == "done" and "build" in progress.phase_seconds


def test_progress_for_people_shows_steps_and_times():
    out = io.StringIO()
    progress = Progress(stream=out)
    with progress.phase("build"):
        progress.build_event({"step": 2, "total": 9, "instruction": "COPY patch-payload/ /"})
    text = out.getvalue()
    assert "Step 2/9 : COPY patch-payload/ /  [patch payload copy]" in text
    assert "patch payload copy done in" in text and "<== build done in" in text


def test_no_daemon_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    with pytest.raises(
        EngineUnavailable, match=r"^no Docker engine answers at unix://.*dead\.sock: .*set DOCKER_HOST$"
    ) as info:
        engine_mod.connect()
    assert "\n" not in str(info.value)


def test_no_daemon_from_the_cli_is_exit_3_without_traceback(tmp_path):
    env = {"DOCKER_HOST": f"unix://{tmp_path}/dead.sock", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "lock"], capture_output=True, text=True, env=env, timeout=120
    )
    assert run.returncode == 3, run.stderr
    assert run.stderr.startswith("error: no Docker engine answers at unix://") and run.stderr.count("\n") == 1
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert time.monotonic() - started < 60


def test_build_with_no_daemon_is_exit_3_and_tags_nothing(tmp_path):
    from stack_e2e import cli, recipe_copy

    recipe = recipe_copy(
        tmp_path,
        "b200-amd64",
        base="127.0.0.1:5000/vllm/vllm-openai",
        tag=f"v{DEFAULT_VERSION}-amd64",
        digest="sha256:" + "ab" * 32,
    )
    run = cli(
        "build",
        "--recipe",
        str(recipe),
        "--push",
        "--owner",
        "e2e",
        "--json",
        env={"DOCKER_HOST": f"unix://{tmp_path}/dead.sock"},
    )
    assert run.returncode == 3, run.stderr
    # --json: the failure is the one object on stdout (nothing else is printed there)
    failure = json.loads(run.stdout)
    assert failure["ok"] is False and failure["exit_code"] == 3 and "no Docker engine answers" in failure["error"]
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert lines[-1].startswith("error: no Docker engine answers at unix://")
    assert json.loads(lines[-2])["event"] == "error" and json.loads(lines[-2])["exit_code"] == 3


def test_the_engine_says_its_version_api_storage_driver_and_image_store():
    """`GET /version` and `GET /info` as Docker 29 answers them with the containerd image store (the shape of
    the engine API's documentation), and as the classic store does."""
    from stackbuild.image.engine import engine_of

    version = {
        "Version": "29.0.1",
        "ApiVersion": "1.52",
        "Os": "linux",
        "Arch": "arm64",
        "Components": [{"Name": "Engine", "Version": "29.0.1"}, {"Name": "containerd", "Version": "v2.1.4"}],
    }
    containerd = {"Driver": "overlayfs", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}
    about = engine_of(version, containerd, "unix:///run/user/1000/docker.sock")
    assert (about.name, about.version, about.api_version, about.storage_driver, about.image_store, about.platform) == (
        "Docker Engine",
        "29.0.1",
        "1.52",
        "overlayfs",
        "containerd",
        "linux/arm64",
    )
    assert about.line == (
        "Docker Engine 29.0.1 (API 1.52, overlayfs, containerd image store, linux/arm64) "
        "at unix:///run/user/1000/docker.sock"
    )
    classic = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"], ["Supports d_type", "true"]]}
    assert engine_of(version, classic, "unix:///var/run/docker.sock").image_store == "classic"


def test_a_local_image_and_a_registry_config_are_the_same_by_content_not_by_id():
    from types import MappingProxyType

    from stackbuild.image.engine import _image_info
    from stackbuild.image.registry import image_info_of_config

    entrypoint = ["python3", "/opt/glm53/preflight.py"]
    env = ["PATH=/usr/bin", "GLM53_OVERLAY_STRICT=1"]
    config = {
        "os": "linux",
        "architecture": "amd64",
        "config": {"Labels": {"a": "1"}, "Entrypoint": entrypoint, "Env": env, "Cmd": None},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64, "sha256:" + "2" * 64]},
    }
    remote = image_info_of_config("sha256:" + "c" * 64, config)
    # What the containerd image store calls it: the manifest's digest, not the config's. The engine's
    # inspect data spells an unset setting as empty where the config leaves it out.
    local = _image_info(
        {
            "Id": "sha256:" + "a" * 64,
            "Os": "linux",
            "Architecture": "amd64",
            "Config": {"Labels": {"a": "1"}, "Entrypoint": entrypoint, "Env": env, "WorkingDir": "", "Volumes": None},
            "RootFS": {"Type": "layers", "Layers": ["sha256:" + "1" * 64, "sha256:" + "2" * 64]},
        }
    )
    assert local.same_content(remote) and remote.same_content(local)
    from dataclasses import replace

    # The same layers and labels, started another way: another image.
    other_env = image_info_of_config(remote.id, {**config, "config": {**config["config"], "Env": env[:1]}})
    assert not local.same_content(other_env)
    other_entrypoint = image_info_of_config(remote.id, {**config, "config": {**config["config"], "Entrypoint": ["sh"]}})
    assert not local.same_content(other_entrypoint)
    assert not replace(local, labels=MappingProxyType({"a": "2"})).same_content(remote)
    assert not replace(local, layers=local.layers[:1]).same_content(remote)
    assert not replace(local, architecture="arm64").same_content(remote)
    assert not replace(local, layers=()).same_content(replace(remote, layers=()))
