"""Every documented exit code is one a command returns, and a test runs a command that returns it.

The codes come from geometry/errors.py ExitCode (the docs' table is generated from it).
Most are exercised where their failure lives (bad input in tests/unit/stackbuild/cli/test_bad_*.py, the
registry and engine in tests/e2e/image/*_e2e.py, `qualify` in tests/unit/stackbuild/serve/qualify/test_qualify.py, ...):
:func:`exercised_codes` finds them by reading the tests, so nothing here runs them twice.
:data:`TABLE` runs, through the real CLI in this process, the commands no other test drives
to their code. :data:`UNEXERCISED` names the codes no test reaches through a command, each
with why; the test fails when a code is added that nothing exercises, and when one of
these gains a test (take it off the list).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable

import pytest
from bad_input_helpers import DEFAULT_OUTPUT_DIRS, DIGEST, invoke, snapshot
from recipe_copies import copy_recipe
from support.repo import REPO

from geometry.errors import ExitCode

TESTS = REPO / "tests"

# Codes no test reaches through a command, and why.
UNEXERCISED = {
    86: (
        "the build's patch step exits with it, no build.py command does (build reports it as 6); "
        "tests/unit/stackbuild/image/test_render.py asserts the rendered step exits with it"
    ),
    17: (
        "pre-flight's 'cannot be checked' needs an installed vLLM that disagrees with the simulator or cannot plan "
        "the flags; geometry/preflight's tests cover the outcome, "
        "tests/unit/geometry/preflight/test_check.py the code; "
        "tests/unit/geometry/oracle/test_record.py asserts it of the image's gate (a disagreeing oracle record)"
    ),
    18: (
        "`deploy` writes only manifests its generator makes, which pass the schemas; "
        "tests/unit/stackbuild/serve/test_deploy_k8s.py "
        "feeds the validator broken ones (ManifestInvalid)"
    ),
    27: (
        "the image's entrypoint returns it (a multi-node worker's pre-flight), no build.py command does; "
        "tests/e2e/serve/test_multinode_rendezvous.py asserts it of two containers, "
        "tests/unit/geometry/preflight/test_ranks.py of the exchange"
    ),
    28: (
        "the image's entrypoint returns it (a multi-node worker whose leader stays silent), no build.py command does; "
        "tests/e2e/serve/test_multinode_rendezvous.py and tests/unit/geometry/preflight/test_ranks.py assert it"
    ),
    33: (
        "`qualify --capacity` exits with it against a live vLLM server that runs together other than the gate "
        "predicts; tests/unit/stackbuild/serve/qualify/test_capacity.py asserts the error's code"
    ),
    25: (
        "`qualify` below the recipe's qualify.min_* needs a vLLM server that streams slowly; "
        "tests/unit/stackbuild/serve/qualify/test_qualify.py checks the figures against the expectations "
        "without a server"
    ),
}

# Helpers of the tests that assert a command's exit code: (helper name, index of the code argument).
CODE_HELPERS = {"assert_refused": 1, "one_line": 1}
# What a test module holds when its tests run build.py's CLI (in process or as a subprocess).
CLI_MARKERS = ("build.py", "invoke(", "CliRunner", "cli(")


def _codes_asserted(function: ast.FunctionDef) -> set[int]:
    codes: set[int] = set()
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Attribute)
            and node.left.attr in ("returncode", "exit_code")
        ):
            codes |= {c.value for c in node.comparators if isinstance(c, ast.Constant) and type(c.value) is int}
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CODE_HELPERS:
            at = CODE_HELPERS[node.func.id]
            if len(node.args) > at and isinstance(node.args[at], ast.Constant) and type(node.args[at].value) is int:
                codes.add(node.args[at].value)
    return codes


def exercised_codes() -> dict[int, list[str]]:
    """``{code: [test node ids]}``: the tests, in modules that run the CLI, asserting a command exited with it."""
    found: dict[int, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if not any(marker in text for marker in CLI_MARKERS):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                for code in _codes_asserted(node):
                    found.setdefault(code, []).append(f"{path.relative_to(TESTS)}::{node.name}")
    return found


def _compose_stub(tmp_path: Path, config_stderr: str) -> Path:
    """A Compose new enough to be asked (`version --short` 2.40.0) whose `config` refuses with ``config_stderr``."""
    path = tmp_path / "docker-compose"
    path.write_text(
        "#!/bin/sh\n"
        'case "$*" in *"version --short"*) echo 2.40.0; exit 0;; esac\n'
        f"echo '{config_stderr}' >&2; exit 15\n"
    )
    path.chmod(0o755)
    return path


def _compose(tmp_path: Path) -> list:
    return ["compose", "--recipe", copy_recipe(tmp_path), "-o", tmp_path / "out.compose.yaml", "--digest", DIGEST]


# (name, code, command line given tmp_path, environment given tmp_path, words the one error line holds)
TABLE: list[tuple[str, int, Callable[[Path], list], Callable[[Path], dict], tuple[str, ...]]] = [
    (
        "compose, vLLM's parser cannot run",
        12,
        _compose,
        lambda tmp: {"GLM53_ORACLE_PYTHON": "/bin/false"},
        ("the serve-parser oracle (/bin/false) exited 1 without a verdict",),
    ),
    (
        "compose, Compose rejects the file",
        13,
        _compose,
        lambda tmp: {"GLM53_COMPOSE_BIN": str(_compose_stub(tmp, "services.vllm.env_file: invalid"))},
        ("docker compose config rejected the file: services.vllm.env_file: invalid",),
    ),
]


@pytest.mark.parametrize("name, code, argv, env, words", TABLE, ids=[case[0] for case in TABLE])
def test_the_command_exits_with_the_documented_code(tmp_path, name, code, argv, env, words):
    args, environment = argv(tmp_path), env(tmp_path)
    before = snapshot(tmp_path, *DEFAULT_OUTPUT_DIRS)
    result = invoke(args, **environment)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"exception escaped the CLI: {result.exception!r}") from result.exception
    assert result.exit_code == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    # Progress lines may come first (the oracle says it imports vLLM); one error line, the last.
    *progress, last = result.stderr.splitlines()
    assert not any(line.startswith("error: ") for line in progress), result.stderr
    assert last.startswith("error: ") and all(word in last for word in words), last
    assert snapshot(tmp_path, *DEFAULT_OUTPUT_DIRS) == before  # nothing written


def test_every_documented_code_is_exercised_or_listed_with_why():
    exercised = set(exercised_codes()) | {case[1] for case in TABLE}
    documented = {int(code) for code in ExitCode}
    assert documented - exercised == set(UNEXERCISED), (
        "codes no test drives a command to (add a TABLE case, or list it in UNEXERCISED with why): "
        f"{sorted(documented - exercised - set(UNEXERCISED))}; listed but exercised (take off UNEXERCISED): "
        f"{sorted(set(UNEXERCISED) & exercised)}"
    )
    assert set(UNEXERCISED) <= documented


def test_the_scan_sees_the_tests_that_assert_codes():
    """The scan is what the check above rests on: it finds tests known to drive commands to their codes."""
    found = exercised_codes()
    assert (
        "unit/stackbuild/cli/test_bad_owners_and_serving.py::test_an_unexpected_exception_is_one_line_with_its_own_code"
        in found[70]
    )
    assert "unit/stackbuild/serve/qualify/test_qualify.py::test_nothing_listens" in found[20]
    assert (
        "e2e/image/test_pinned_tags_e2e.py::test_build_push_onto_a_taken_pinned_tag_tags_and_pushes_nothing"
        in found[14]
    )
    assert (
        "unit/stackbuild/serve/test_compose_version.py::test_a_compose_binary_that_does_not_run_is_refused" in found[29]
    )
