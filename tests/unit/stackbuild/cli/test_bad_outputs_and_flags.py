"""Every class of bad input is one line naming the file, key or flag, a documented exit code, nothing written:
output paths, commands and flags.

Each case breaks a copy of the default recipe (or its configs, or a command line) and runs ,
`build --dry-run` and `compose -o` on it (or the one command the case is about). Expected numbers are
worked out here by hand, not read from the code under test.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_helpers import (
    DEAD_DOCKER,
    DIGEST,
    assert_refused,
    invoke,
    with_base_digest,
)
from recipe_copies import copy_recipe
from recipe_copies import set_key as _set
from support.repo import REPO

from stackbuild import cli as cli_module

# --- outputs -------------------------------------------------------------------------------------


def _git_checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    (checkout / "notes.md").write_text("tracked\n")
    subprocess.run(["git", "-C", str(checkout), "add", "notes.md"], check=True)
    subprocess.run(
        ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "x"], check=True
    )
    return checkout


@pytest.mark.parametrize("command", ["render", "compose"])
def test_output_into_a_missing_directory(tmp_path, command):
    recipe = copy_recipe(tmp_path, with_base_digest())
    out = tmp_path / "missing" / "out.txt"
    args = [command, "--recipe", recipe, "-o", out] + (["--digest", DIGEST] if command == "compose" else [])
    assert_refused(invoke(args), 15, f"-o {out}: directory {out.parent} does not exist")
    assert not out.parent.exists()


@pytest.mark.parametrize("command", ["render", "compose"])
def test_output_unwritable(tmp_path, command):
    recipe = copy_recipe(tmp_path, with_base_digest())
    out = Path("/proc/glm53-out.txt")  # not writable, even for root
    args = [command, "--recipe", recipe, "-o", out] + (["--digest", DIGEST] if command == "compose" else [])
    assert_refused(invoke(args), 15, f"-o {out}: ")


@pytest.mark.parametrize("command", ["render", "compose"])
def test_output_is_a_directory(tmp_path, command):
    """An output path (exit 15, as the documents' table says), in one line; a one-node compose says to name a file."""
    recipe = copy_recipe(tmp_path, with_base_digest())
    args = [command, "--recipe", recipe, "-o", tmp_path] + (["--digest", DIGEST] if command == "compose" else [])
    assert_refused(invoke(args), 15, f"-o {tmp_path}: is a directory")


@pytest.mark.parametrize("command", ["render", "compose"])
def test_output_over_a_tracked_file(tmp_path, command):
    recipe = copy_recipe(tmp_path, with_base_digest())
    tracked = _git_checkout(tmp_path) / "notes.md"
    args = [command, "--recipe", recipe, "-o", tracked] + (["--digest", DIGEST] if command == "compose" else [])
    assert_refused(invoke(args), 15, f"-o {tracked}: git tracks this file and it is not this command's output")
    assert tracked.read_text() == "tracked\n"


def test_render_replaces_its_own_tracked_output(tmp_path):
    recipe = copy_recipe(tmp_path, with_base_digest())
    checkout = _git_checkout(tmp_path)
    dockerfile = checkout / "Dockerfile"
    assert invoke(["render", "--recipe", recipe, "-o", dockerfile]).exit_code == 0
    subprocess.run(["git", "-C", str(checkout), "add", "Dockerfile"], check=True)
    result = invoke(["render", "--recipe", recipe, "-o", dockerfile])
    assert result.exit_code == 0, result.stderr
    other = copy_recipe(tmp_path / "other", with_base_digest(_set("name", "another-recipe")))
    assert_refused(invoke(["render", "--recipe", other, "-o", dockerfile]), 15, "git tracks this file")


# --- commands and flags --------------------------------------------------------------------------


def test_verify_with_a_tag_is_a_usage_error(tmp_path):
    recipe = copy_recipe(tmp_path, with_base_digest())
    assert_refused(
        invoke(["verify", "ghcr.io/acme/glm:latest", "--recipe", recipe]),
        2,
        "verify ghcr.io/acme/glm:latest: give the image by digest",
    )
    assert_refused(
        invoke(["verify", "ghcr.io/acme/glm@sha256:zz", "--recipe", recipe]),
        2,
        "verify ghcr.io/acme/glm@sha256:zz: not an image reference (invalid reference format); "
        "give the image by digest",
    )


def test_qualify_attach_needs_a_digest_reference_before_anything_is_measured():
    # Nothing listens at the URL: a measurement would exit 20 (server unreachable); the reference is refused first.
    for reference, needle in (
        ("127.0.0.1:5000/acme/glm:latest", "give the image by digest"),
        ("127.0.0.1:5000/acme/glm@sha256:abc", "not an image reference"),
        ("127.0.0.1:5000/acme/glm", "give the image by digest"),
    ):
        assert_refused(
            invoke(["qualify", "--url", "http://127.0.0.1:1", "--attach", reference]),
            2,
            f"qualify --attach {reference}: {needle}",
        )
    result = invoke(["qualify", "--url", "http://127.0.0.1:1", "--attach", "glm:latest", "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["exit_code"] == 2


def test_usage_errors_are_one_line(tmp_path):
    assert_refused(
        invoke(["build", "--frobnicate"]), 2, "build.py build: No such option '--frobnicate'", "build --help"
    )
    assert_refused(invoke(["compose", "--port", "eighty"]), 2, "'--port'")
    assert_refused(invoke(["geometry", "--recipe", tmp_path]), 2, "--recipe")
    assert_refused(invoke(["frobnicate"]), 2, "build.py: No such command 'frobnicate'")
    assert_refused(invoke(["--frobnicate"]), 2, "build.py: No such option '--frobnicate'")


def test_a_real_process_prints_one_line_and_no_traceback(tmp_path):
    """The same refusal from a real `python build.py` process (exit code and stderr as a user sees them)."""
    recipe = copy_recipe(tmp_path, with_base_digest(_set("geometry.kv_cache_memory_gib", float("nan"))))
    proc = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "geometry", "--recipe", str(recipe)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DOCKER_HOST": DEAD_DOCKER},
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"error: {recipe}: geometry.kv_cache_memory_gib: expected a finite number of at most "
        "9,007,199,254,740,992, got number nan\n"
    )


def _message_strings(path: Path):
    """String constants (and f-string pieces) with a space, docstrings left out: the text of messages."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and " " in node.value
            and id(node) not in docstrings
        ):
            yield node.value


def test_no_message_suggests_a_flag_that_does_not_exist():
    import re

    from stackbuild.core.serve_flags import GENERATED_FLAGS

    ours = {
        opt
        for command in cli_module.cli.commands.values()
        for param in command.params
        for opt in (*param.opts, *param.secondary_opts)
    } | {"--help"}
    vllms = set(GENERATED_FLAGS) | {"--api-key"}  # named where a message talks about vLLM's own command line
    others = {"--short"}  # `docker compose version --short`, named where a message quotes that command
    sources = sorted((REPO / "stackbuild").rglob("*.py"))
    unknown = set()
    for source in sources:
        for text in _message_strings(source):
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text):
                if flag not in ours | vllms | others:
                    unknown.add(f"{source.name}: {flag} in {text[:80]!r}")
    assert not unknown
