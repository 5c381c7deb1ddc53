"""Connecting to the engine when none answers: one clear line, exit 3, nothing tagged."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.errors import EngineUnavailable
from stackbuild.image import connect as connect_mod


def test_no_daemon_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    with pytest.raises(
        EngineUnavailable, match=r"^no Docker engine answers at unix://.*dead\.sock: .*set DOCKER_HOST$"
    ) as info:
        connect_mod.connect()
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
