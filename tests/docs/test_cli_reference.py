"""docs/cli.md is what the CLI generates, and says what `--help` says: every command, option and exit code."""

from __future__ import annotations

import difflib
import re

import cli_reference
import pytest
from bad_input_helpers import invoke

from geometry.errors import ExitCode
from stackbuild.cli import cli
from stackbuild.command_exits import COMMAND_EXITS, CommandExits


def test_docs_cli_md_is_what_the_cli_generates():
    current, fresh = cli_reference.REFERENCE.read_text(), cli_reference.reference()
    diff = "".join(difflib.unified_diff(current.splitlines(True), fresh.splitlines(True), "as is", "generated"))
    assert current == fresh, f"docs/cli.md is stale; run `{cli_reference.COMMAND}` (or `make docs`):\n{diff}"


def test_check_exits_1_on_a_stale_reference_and_0_once_rewritten(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "cli.md"
    stale.write_text("# The command line\n\nbuild.py render --recipe R\n")
    monkeypatch.setattr(cli_reference, "REFERENCE", stale)
    monkeypatch.setattr(cli_reference, "REPO", tmp_path)
    assert cli_reference.main(["--check"]) == 1
    assert "-build.py render --recipe R" in capsys.readouterr().out
    assert cli_reference.main([]) == 0
    assert cli_reference.main(["--check"]) == 0
    assert cli_reference.main(["--bogus"]) == 2


def _section(name: str) -> str:
    text = cli_reference.REFERENCE.read_text()
    start = text.index(f"## `build.py {name}`")
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_every_command_and_every_option_has_its_place():
    """Read from click's tree here, independently of the generator: each option's long flag in its section."""
    for name, command in cli.commands.items():
        section = _section(name)
        for param in command.params:
            for flag in [o for o in param.opts + param.secondary_opts if o.startswith("--")]:
                assert f"`{flag}" in section or f", {flag}" in section or f"/ {flag}" in section, (name, flag)


# What a hand-written reference missed, by command: the generated one must have it.
ONCE_MISSING = {
    "geometry": ["--context"],
    "build": ["--allow-unpinned", "--owner", "--repository", "--no-push"],
    "compose": ["--digest", "--json"],
    "deploy": ["--api-key-secret", "--image-pull-secret", "--digest"],
    "preflight": ["--leader-address", "--node-rank"],
    "push": ["--report"],
}


@pytest.mark.parametrize("name", sorted(ONCE_MISSING))
def test_the_options_the_hand_written_reference_left_out_are_in(name):
    section = _section(name)
    for flag in ONCE_MISSING[name]:
        assert flag in section, (name, flag)


@pytest.mark.parametrize("name", ["record", "push", "index"])
def test_allow_unpinned_says_what_it_does_for_a_command_that_builds_nothing(name):
    result = invoke([name, "--help"])
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "--allow-unpinned" in text and "Build FROM" not in text
    assert "without a base digest" in text


def test_geometry_help_names_exit_5_the_code_a_ci_checks():
    result = invoke(["geometry", "--help"])
    assert result.exit_code == 0
    assert re.search(r"^\s+5\s+the gate refuses", result.stdout, re.M), result.stdout


def test_each_help_lists_the_codes_its_command_returns():
    for name in cli.commands:
        out = invoke([name, "--help"]).stdout.split("Exit codes:", 1)[1]
        listed = {int(m) for m in re.findall(r"^\s+(\d+)\s\s\S", out, re.M)}
        assert listed == set(COMMAND_EXITS[name].all), name
        assert {0, 2, 70} <= listed


def test_every_command_has_its_exit_codes_and_no_entry_lacks_a_command():
    assert set(COMMAND_EXITS) == set(cli.commands)


def test_an_exit_code_nobody_defined_is_refused():
    with pytest.raises(ValueError, match=r"exit codes \[15, 99\] are not entries of geometry/errors.py ExitCode"):
        CommandExits((15, 99))
    with pytest.raises(ValueError, match=r"exit codes \[5\] are explained but not returned"):
        CommandExits((ExitCode.OUTPUT,), {ExitCode.GEOMETRY: "a gate that this command does not run"})


def test_the_table_holds_every_code_once_with_its_title():
    table = cli_reference.REFERENCE.read_text().split("## Output, errors and exit codes", 1)[1]
    rows = re.findall(r"^\| (\d+) \| ", table, re.M)
    assert [int(r) for r in rows] == sorted(int(code) for code in ExitCode)
