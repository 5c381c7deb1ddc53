"""The GitHub Actions checkers the workflow tests run, each offline: actionlint (its PyPI wheel), zizmor
(the Actions security linter, --offline) and the GitHub workflow schema (check-jsonschema's built-in
copy), with every proxy pointed at a closed port so none of them can reach the network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.repo import REPO

WORKFLOWS = REPO / ".github" / "workflows"
BIN = Path(sys.executable).parent
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / command[0]), *command[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **OFFLINE},
    )


def actionlint(path: Path) -> subprocess.CompletedProcess:
    return _run("actionlint", "-no-color", str(path))


def zizmor(path: Path) -> subprocess.CompletedProcess:
    return _run("zizmor", "--offline", "--no-progress", str(path))


def schema_check(path: Path) -> subprocess.CompletedProcess:
    return _run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", str(path))


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.yml")) + sorted(WORKFLOWS.glob("*.yaml"))
