"""The engine layer's own rules, checked without a daemon: stream errors, step names,
progress events, and the engine's inspect documents as values."""

from __future__ import annotations

import io
import json

import pytest

from geometry.image_contract import ContractError
from stackbuild.image import engine as engine_mod
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
        progress.build_event({"step": 3, "total": 7, "instruction": "RUN python3 /x/overlay/apply.py"})
        progress.build_event({"output": "applied 3 patches"})
        progress.build_event({"step": 7, "total": 7, "instruction": "LABEL a=b"})
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
        progress.build_event({"step": 2, "total": 7, "instruction": "COPY patch-payload/ gate-payload/ /"})
    text = out.getvalue()
    assert "Step 2/7 : COPY patch-payload/ gate-payload/ /  [payload copy]" in text
    assert "payload copy done in" in text and "<== build done in" in text


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
