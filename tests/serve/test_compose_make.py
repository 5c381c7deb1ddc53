"""`make compose` on a fresh checkout writes the default recipe's compose file.

The checkout is a clone of the committed HEAD; the Makefile runs with this
test's virtualenv (VENV=..., its install step taken as done). The vLLM
serve-parser check runs when that venv can import vLLM (in the Makefile's
.venv: after `make oracle`, the .oracle marker), else it says it skipped.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from compose_support import require_compose_binary
from support.repo import REPO

from stackbuild.core.recipe import load_recipe
from stackbuild.core.serve_args import serve_argv


def test_make_compose_on_a_fresh_checkout(tmp_path):
    require_compose_binary()
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.fail("make and git are needed")
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix):
        pytest.skip("the tests are not running in a virtualenv the Makefile could use")
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(checkout)], check=True, timeout=120)
    recipe = load_recipe(checkout / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml")
    target = checkout / "compose" / f"{recipe.name}.compose.yaml"
    target.unlink(missing_ok=True)

    proc = subprocess.run(
        ["make", "-C", str(checkout), "compose", f"VENV={venv}", "-o", f"{venv}/.installed"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"wrote {target}" in proc.stdout + proc.stderr
    doc = yaml.safe_load(target.read_text())
    assert doc["services"]["vllm"]["command"] == serve_argv(recipe)
    skipped = "notice: vLLM serve-parser check skipped" in proc.stderr
    has_vllm = (
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('vllm') else 1)",
            ]
        ).returncode
        == 0
    )
    assert skipped is not has_vllm, proc.stderr
    if (venv / ".oracle").exists():
        assert has_vllm
    assert "docker compose config check skipped" not in proc.stderr
