"""Running build.py on broken input and checking how it refuses: one line, a documented code, nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from click.testing import CliRunner, Result
from recipe_copies import TEST_DIGEST
from support.repo import REPO

from stackbuild.cli import cli
from stackbuild.command_exits import COMMAND_EXITS

# A daemon address where nothing listens: input checks must fail before any engine is asked.
DEAD_DOCKER = "unix:///nonexistent/docker.sock"
DIGEST = "sha256:" + "5e" * 32
# The exit codes documented for refused input (geometry/errors.py ExitCode): recipe or usage 2,
# geometry gate 5, output path 15. 70 (internal error) must never come from input.
INPUT_EXIT_CODES = {2, 5, 15}
INTERNAL_ERROR = 70
# Where the CLI writes by default (compose/, out/): a refusal leaves them as they were.
DEFAULT_OUTPUT_DIRS = (REPO / "compose", REPO / "out")


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``roots`` with its size and modification time."""
    out = {}
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                out[path] = (st.st_size, st.st_mtime_ns)
    return out


def invoke(args: list[str], **env: Any) -> Result:
    """build.py's CLI in this process (stdout and stderr apart), no engine, no owner, a fixed date."""
    base = {"DOCKER_HOST": DEAD_DOCKER, "IMAGE_OWNER": None, "SOURCE_DATE_EPOCH": "1764460800"}
    result = CliRunner().invoke(cli, [str(a) for a in args], env={**base, **env}, prog_name="build.py")
    _assert_a_code_it_documents(args, result)
    return result


def _assert_a_code_it_documents(args: list, result: Result) -> None:
    """Every run of a command ends with a code its `--help` lists (stackbuild/command_exits.py)."""
    command = next((str(a) for a in args if not str(a).startswith("-")), None)
    if command in COMMAND_EXITS and isinstance(result.exit_code, int):
        listed = COMMAND_EXITS[command].all
        assert result.exit_code in listed, (
            f"`{command}` exited {result.exit_code}, which its help does not list ({listed}): "
            f"add it in stackbuild/command_exits.py; stderr: {result.stderr[-500:]}"
        )


def assert_refused(result: Result, code: int, *needles: str) -> str:
    """Exit ``code``, exactly one ``error:`` line on stderr holding every needle, no traceback; returns the line."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"exception escaped the CLI: {result.exception!r}") from result.exception
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert result.exit_code == code, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def edit_json(path: Path, edit: Callable[[dict], Any]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


GIB = 1024**3
CHECK_COMMANDS = ("geometry", "build", "compose")


def with_base_digest(edit=None):
    def both(data):
        data["base"]["digest"] = TEST_DIGEST
        if edit:
            edit(data)

    return both


def check_command(name: str, recipe: Path, out: Path) -> list:
    if name == "geometry":
        return ["geometry", "--recipe", recipe]
    if name == "build":  # an owner: no notice of the stand-in one on stderr, only the refusal
        return ["build", "--dry-run", "--owner", "acme", "--recipe", recipe]
    return ["compose", "--recipe", recipe, "-o", out, "--digest", DIGEST]


def run_everywhere(tmp_path: Path, recipe: Path, code: int, *needles: str) -> None:
    """Each command (the dry run of the build included: it exits as the build would) refuses the same way
    and writes nothing (its -o included)."""
    out = tmp_path / "out.compose.yaml"
    before = snapshot(tmp_path, *DEFAULT_OUTPUT_DIRS)
    for name in CHECK_COMMANDS:
        line = assert_refused(invoke(check_command(name, recipe, out)), code, *needles)
        assert not out.exists()
        assert snapshot(tmp_path, *DEFAULT_OUTPUT_DIRS) == before, name
    return line
