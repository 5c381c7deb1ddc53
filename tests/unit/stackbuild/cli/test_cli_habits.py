"""The habits of the tools users know: `--version`, a bare `build.py` printing its help, and
`--json` printing one object on failure too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version

import pytest
from support.repo import REPO

from stackbuild.cli import cli


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_version_names_project_commit_and_modelled_vllm():
    done = run("--version")
    assert done.returncode == 0, done.stderr
    pin = re.search(r"^vllm==(\S+)$", (REPO / "requirements" / "vllm.txt").read_text(), re.M).group(1)
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    line = done.stdout.strip()
    assert line.startswith(f"glm53-dflash2-images {version('glm53-dflash2-images')} ")
    assert f"models vLLM {pin})" in line
    assert (REPO / "overlay" / "series" / f"vllm-{pin}").is_dir()
    assert head and f"commit {head}" in line


def test_bare_build_py_prints_help():
    done = run()
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("Usage: build.py")
    for name in cli.commands:
        assert re.search(rf"^\s+{name}\s", done.stdout, re.M), name


JSON_COMMANDS = sorted(
    name for name, command in cli.commands.items() if any(p.name == "as_json" for p in command.params)
)


def test_the_json_commands_are_the_ones_that_read():
    assert {"geometry", "build", "compose", "preflight", "verify", "lock"} <= set(JSON_COMMANDS)


# The JSON commands that read a recipe (`up` reads a compose file instead: its own test below).
RECIPE_COMMANDS = [n for n in JSON_COMMANDS if any(p.name == "recipe_path" for p in cli.commands[n].params)]


def test_json_up_prints_one_object_on_failure(tmp_path):
    missing = tmp_path / "nowhere.compose.yaml"
    done = run("up", "-f", str(missing), "--json")
    assert done.returncode == 2, (done.stdout, done.stderr)
    data = json.loads(done.stdout)
    assert data == {"ok": False, "exit_code": 2, "error": data["error"]}
    assert f"-f {missing}: cannot read a compose file" in data["error"]
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("name", RECIPE_COMMANDS)
def test_json_prints_one_object_on_failure(name, tmp_path):
    """A recipe that is not there: exit 2, one line on stderr, and one object on stdout."""
    missing = str(tmp_path / "nowhere" / "recipe.yaml")
    args = {
        "verify": ["127.0.0.1:5000/a/b@sha256:" + "0" * 64],
        "preflight": ["--models-dir", str(tmp_path)],
        "pin": ["--models-dir", str(tmp_path)],
        "record": ["--image", "x:1"],
        "deploy": ["--target", "k8s"],
        "qualify": ["--url", "http://127.0.0.1:1"],
    }.get(name, [])
    done = run(name, *args, "--recipe", missing, "--json")
    assert done.returncode == 2, (done.stdout, done.stderr)
    data = json.loads(done.stdout)
    assert data == {"ok": False, "exit_code": 2, "error": data["error"]}
    assert "recipe file not found" in data["error"] and missing in data["error"]
    assert len(done.stderr.strip().splitlines()) == 1


def test_json_usage_error_is_an_object_too():
    done = run("geometry", "--no-such-flag", "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout)["ok"] is False


def test_json_failure_after_the_commands_own_object_adds_none(tmp_path):
    """`geometry --json` prints its report, then fails the gate: still exactly one object."""
    from recipe_copies import copy_recipe, set_key

    recipe = copy_recipe(tmp_path, set_key("serving.max_model_len", 2 * 1024 * 1024))
    done = run("geometry", "--recipe", str(recipe), "--json")
    assert done.returncode == 5
    data = json.loads(done.stdout)  # one document: a second object would not parse
    assert data["verdict"]["passed"] is False


def test_dry_run_push_without_owner_exits_as_the_push_would(tmp_path):
    """`build --dry-run --push` with no owner: exit 2 naming image.repository, as the real push."""
    from recipe_copies import copy_recipe, pinned

    recipe = copy_recipe(tmp_path, pinned)
    done = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "build", "--recipe", str(recipe), "--dry-run", "--push"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "IMAGE_OWNER"},
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {recipe}: image.repository: ") and "no owner to push to" in done.stderr
    assert done.stdout == ""


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    "command",
    [
        ("compose", "--digest", DIGEST, "-o", "{tmp}/c.compose.yaml"),
        ("deploy", "--target", "k8s", "--owner", "acme", "--digest", DIGEST, "-o", "{tmp}"),
    ],
)
def test_a_long_step_says_so_before_it_starts(tmp_path, command):
    """compose and deploy import vLLM (10-20 s) for the serve-parser check: a line on stderr says so first.
    Run again on the same vLLM, the command lines it passed are not asked again, and a line says so."""
    from recipe_copies import copy_recipe

    from stackbuild.serve.parser_verdicts import CACHE_ENV

    recipe = copy_recipe(tmp_path)
    said = {}
    for run_number in (1, 2):
        done = run(
            *(a.replace("{tmp}", str(tmp_path)) for a in command),
            "--recipe",
            str(recipe),
            env={CACHE_ENV: str(tmp_path / "cache")},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("wrote ")
        said[run_number] = [line for line in done.stderr.splitlines() if "vLLM's `vllm serve` parser" in line]
    assert any("importing vLLM takes" in line for line in said[1]), said
    assert said[2] and all("passed it before" in line for line in said[2]), said


def test_help_texts_are_the_commands_own():
    """--repository says what each command does with it; only the pushing commands say push."""
    helps = {}
    for name, command in cli.commands.items():
        for param in command.params:
            if param.name == "repository":
                helps[name] = param.help
    assert {"render", "build", "push", "index", "compose", "deploy", "record"} <= set(helps)
    assert len(set(helps.values())) == len(helps)  # no text copied across commands
    for name, text in helps.items():
        assert ("push" in text.lower()) == (name in ("build", "push", "index")), (name, text)


def test_compose_o_a_directory_is_an_output_error(tmp_path):
    """A one-node recipe writes one file: -o DIR exits 15 (an output path), as the exit-code table says."""
    from recipe_copies import copy_recipe

    recipe = copy_recipe(tmp_path)
    done = run("compose", "--recipe", str(recipe), "--digest", DIGEST, "-o", str(tmp_path))
    assert done.returncode == 15, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: -o {tmp_path}: is a directory; a one-node recipe writes one compose file: give its file name"
    ]
