"""The whole tree is formatted by ruff and passes its linter (pyproject.toml [tool.ruff]:
pycodestyle, pyflakes, import order); `make lint` runs the same two commands."""

from __future__ import annotations

import subprocess
import sys

from support.repo import REPO


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True)


def test_the_tree_is_formatted():
    run = _ruff("format", "--check", ".")
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_tree_passes_the_linter():
    run = _ruff("check", "--output-format", "concise", ".")
    assert run.returncode == 0, run.stdout + run.stderr
