"""`compose` checks the file with a Docker Compose that reads it: >= 2.24 (env_file `required`), or exit 29.

Writing needs no Compose (without one the check is skipped, said on stderr); a Compose that
is there but older, or does not say its version, is refused in one line before it is asked
anything else, and nothing is written. The old Compose is a stand-in script answering
`version --short` as Compose does (no Compose older than 2.24 is installed here); the
version the real binary reports is read from the real binary.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bad_input_helpers import DEFAULT_OUTPUT_DIRS, DIGEST, assert_refused, invoke, snapshot
from compose_support import require_compose_binary
from recipe_copies import copy_recipe

from stackbuild.core.errors import ComposeVersionError
from stackbuild.serve.validate import compose_version


def compose_answering(tmp_path: Path, answer: str, status: int = 0) -> Path:
    """An executable that answers `version --short` with ``answer`` and exits ``status``; any other use fails."""
    path = tmp_path / "docker-compose"
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1 $2" = "version --short" ]; then printf "%s\\n" "{answer}"; exit {status}; fi\n'
        "echo 'asked more than its version' >&2; exit 99\n"
    )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    "answer, status, needle",
    [
        ("2.23.3", 0, "Docker Compose 2.23.3 is older than 2.24, which the generated files need"),
        ("v2.20.2", 0, "Docker Compose v2.20.2 is older than 2.24"),
        ("1.29.2", 0, "Docker Compose 1.29.2 is older than 2.24"),
        ("", 1, "no Docker Compose version in its answer"),
    ],
)
def test_an_older_compose_is_refused_in_one_line_and_nothing_is_written(tmp_path, answer, status, needle):
    binary = compose_answering(tmp_path, answer, status)
    recipe = copy_recipe(tmp_path)
    out = tmp_path / "out.compose.yaml"
    before = snapshot(tmp_path, *DEFAULT_OUTPUT_DIRS)
    result = invoke(["compose", "--recipe", recipe, "-o", out, "--digest", DIGEST], GLM53_COMPOSE_BIN=str(binary))
    line = assert_refused(result, 29, str(binary), needle)
    assert "asked more" not in result.stderr
    if status == 0:
        assert line.endswith("install Docker Compose >= 2.24 or set GLM53_COMPOSE_BIN to one")
    assert not out.exists()
    assert snapshot(tmp_path, *DEFAULT_OUTPUT_DIRS) == before


def test_a_compose_binary_that_does_not_run_is_refused(tmp_path):
    missing = tmp_path / "no-such-compose"
    recipe = copy_recipe(tmp_path)
    out = tmp_path / "out.compose.yaml"
    result = invoke(["compose", "--recipe", recipe, "-o", out, "--digest", DIGEST], GLM53_COMPOSE_BIN=str(missing))
    assert_refused(result, 29, f"{missing}: cannot run the Docker Compose binary")
    assert not out.exists()


@pytest.mark.parametrize("answer", ["2.24.0", "v2.24.0", "2.40.3", "3.0.0"])
def test_compose_from_2_24_on_is_accepted(tmp_path, answer):
    assert compose_version(str(compose_answering(tmp_path, answer))) == answer


def test_the_compose_binary_here_is_new_enough():
    binary = require_compose_binary()
    said = compose_version(binary)
    major, minor = (int(part) for part in said.lstrip("v").split(".")[:2])
    assert (major, minor) >= (2, 24)
    with pytest.raises(ComposeVersionError):
        compose_version(os.devnull)
