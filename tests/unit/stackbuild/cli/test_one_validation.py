"""One validation of the whole recipe for every command: a recipe the real step would refuse
(the patch series written for another vLLM, extra_args repeating a generated flag, model
paths the one models mount cannot hold) is refused by geometry, render, build --dry-run and
compose alike, with the same line and exit 2, before anything is written."""

from __future__ import annotations

import subprocess
import sys

import pytest
from recipe_copies import copy_recipe, pinned, set_key
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION

COMMANDS = (("geometry",), ("render",), ("build", "--dry-run"), ("compose", "-o", "{out}"))

CASES = {
    "series for another vLLM": (
        set_key("base.vllm_version", "0.33.0"),
        f"base.vllm_version: 0.33.0: the patch series 'vllm-{DEFAULT_VERSION}' is written for vLLM "
        f"{DEFAULT_VERSION} (overlay/series/vllm-{DEFAULT_VERSION}/lock.json)",
    ),
    "extra_args repeats a flag": (
        set_key("serving.extra_args", ["--tensor-parallel-size", "2"]),
        "serving.extra_args[0]: --tensor-parallel-size is generated from "
        "serving.tensor_parallel_size; set it there, not in extra_args",
    ),
    "relative target path": (
        set_key("target.path", "models/GLM-5.3-Flash-NVFP4"),
        "target.path: must be an absolute path inside the container, got 'models/GLM-5.3-Flash-NVFP4'",
    ),
    "models under two roots": (
        set_key("drafter.path", "/drafters/DFlash2"),
        "drafter.path: target and drafter must live under one models directory",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_command_refuses_what_the_real_step_would(tmp_path, case):
    edit, says = CASES[case]
    recipe = copy_recipe(tmp_path, lambda data: (edit(data), pinned(data)))
    out = tmp_path / "out.compose.yaml"
    lines = set()
    for command in COMMANDS:
        args = [a.replace("{out}", str(out)) for a in command]
        done = subprocess.run(
            [sys.executable, str(REPO / "build.py"), *args, "--recipe", str(recipe)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
        assert done.returncode == 2, (command, done.stderr)
        assert done.stdout == ""
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"error: {recipe}: ") and says in line, (command, line)
        lines.add(line)
    assert len(lines) == 1  # the same line from every command
    assert not out.exists()
