"""What the unit tests of the start-time check of mounted checkpoints share: the default recipe's
record of what the build checked, a fake ``nvidia-smi`` (by default one that finds no GPU, as on
this host; a test module takes ``no_gpu`` as an autouse fixture by importing it), and the check run
as the image's entrypoint runs it."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from geometry.preflight import outcome
from geometry.preflight.check import check
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

RECIPE = load_recipe(DEFAULT_RECIPE)
CHECKED = checked_serve(RECIPE, gate_input(RECIPE))


@pytest.fixture(autouse=True)
def no_gpu(tmp_path, monkeypatch):
    """A fake nvidia-smi first on PATH: by default it finds no GPU (as on this host)."""
    return fake_nvidia_smi(tmp_path, monkeypatch, "echo 'NVIDIA-SMI has failed: no devices' >&2; exit 9")


def fake_nvidia_smi(tmp_path: Path, monkeypatch, body: str) -> Path:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return script


def run(models: Path, checked=CHECKED, argv=None) -> outcome.Outcome:
    return check(
        argv or checked.argv, checked, locate=lambda p: p.replace("/models", str(models), 1), overlay_manifest=None
    )


def refused_with(result: outcome.Outcome, code: int) -> str:
    assert result.code == code, result.lines
    assert result.lines[0].startswith("pre-flight: FAIL: "), result.lines
    assert "\n" not in result.lines[0] and "Traceback" not in "".join(result.lines)
    return result.lines[0][len("pre-flight: FAIL: ") :]


def pinned(**revisions) -> object:
    return replace(CHECKED, **{role: replace(getattr(CHECKED, role), revision=rev) for role, rev in revisions.items()})
