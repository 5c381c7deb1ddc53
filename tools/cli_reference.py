"""docs/cli.md, written from build.py's click command tree.

A tool above the CLI (nothing in stackbuild imports the CLI), beside tools/doc_sections.py. Every
command with its usage, help text, options (flags, default, help) and the exit codes it returns
(stackbuild/command_exits.py), and the table of every exit code (geometry/errors.py
ExitCode): the reference says what `--help` says, so it cannot lag the CLI. To change it, change
a help text or an exit-code definition, then::

    python tools/cli_reference.py          # rewrite docs/cli.md (or: make docs)
    python tools/cli_reference.py --check  # exit 1 and a diff when docs/cli.md is stale
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from tools/
    sys.path.insert(0, str(REPO))

from geometry.errors import ExitCode  # noqa: E402
from stackbuild.cli import cli  # noqa: E402
from stackbuild.command_exits import COMMAND_EXITS  # noqa: E402

REFERENCE = REPO / "docs" / "cli.md"
PROG = "build.py"
COMMAND = "python tools/cli_reference.py"
CHECK = "--check"  # this tool's one option (not build.py's)

# Where each command is explained at length (a document under docs/, and its section).
EXPLAINED_IN = {
    "render": "publishing.md",
    "lock": "recipe.md#the-lock",
    "record": "gate.md",
    "geometry": "gate.md",
    "fit": "gate.md#requests-at-once-and-buildpy-fit",
    "build": "publishing.md",
    "push": "publishing.md",
    "index": "publishing.md",
    "compose": "serving.md",
    "up": "publishing.md#deploys-that-require-a-signature",
    "deploy": "serving.md",
    "preflight": "serving.md#the-start-time-pre-flight",
    "pin": "recipe.md#the-lock",
    "verify": "publishing.md",
    "qualify": "serving.md",
}


def _context(command: click.Command, parent: click.Context | None = None) -> click.Context:
    return click.Context(command, info_name=command.name if parent else PROG, parent=parent)


def _md(text: str) -> str:
    """Help text as Markdown: outside `code`, a `<` or `*` is a character, not markup."""
    pieces = text.split("`")
    for i in range(0, len(pieces), 2):  # the even pieces lie outside backticks
        pieces[i] = pieces[i].replace("\\", "\\\\").replace("<", "&lt;").replace("*", "\\*")
    return "`".join(pieces)


def _help_paragraphs(text: str) -> list[str]:
    """A help text's paragraphs as Markdown (click's ``\\b`` marks a block kept as written)."""
    text = (text or "").split("\f")[0]
    out = []
    for block in text.strip().split("\n\n"):
        lines = [line.strip() for line in block.strip().splitlines()]
        if lines and lines[0] == "\b":
            out.append("\n".join(f"    {line}" for line in lines[1:]))
        else:
            out.append(_md(" ".join(lines)))
    return out


def _cell(text: str) -> str:
    return _md(text).replace("|", "\\|").replace("\n", " ")


def _options(ctx: click.Context) -> list[str]:
    rows = []
    for param in ctx.command.get_params(ctx):
        if not isinstance(param, click.Option) or param is ctx.command.get_help_option(ctx):
            continue  # every command takes -h / --help
        record = param.get_help_record(ctx)
        if record is None:  # a hidden option
            continue
        flags, help_text = record
        pipe_safe = flags.replace("|", "\\|")  # a table cell ends at a bare |, even in code
        rows.append(f"| `{pipe_safe}` | {_cell(help_text)} |")
    if not rows:
        return []
    return ["| option | what it does |", "| --- | --- |", *rows]


def _arguments(ctx: click.Context) -> list[str]:
    names = [p.human_readable_name for p in ctx.command.get_params(ctx) if isinstance(p, click.Argument)]
    return [f"Arguments: {', '.join(f'`{n}`' for n in names)} (see the usage line)."] if names else []


def _exits(name: str) -> list[str]:
    exits = COMMAND_EXITS[name]
    rows = [f"| {code} | {_cell(exits.meaning(code))} |" for code in exits.all]
    return ["| exit | when |", "| --- | --- |", *rows]


def command_section(name: str, command: click.Command, root: click.Context) -> str:
    ctx = _context(command, root)
    usage = command.get_usage(ctx).removeprefix("Usage: ")
    parts = [
        f"## `{PROG} {name}`",
        f"```\n{usage}\n```",
        *_help_paragraphs(command.help),
        *(["\n".join(_arguments(ctx))] if _arguments(ctx) else []),
        *(["\n".join(_options(ctx))] if _options(ctx) else []),
        "\n".join(_exits(name)),
        f"Explained in [{EXPLAINED_IN[name].split('#')[0]}]({EXPLAINED_IN[name]}).",
    ]
    return "\n\n".join(parts)


def exit_code_table() -> str:
    rows = [f"| {code} | {_cell(code.title)} | {_cell(code.meaning)} |" for code in sorted(ExitCode)]
    return "\n".join(["| code | in short | what failed |", "| --- | --- | --- |", *rows])


def reference() -> str:
    """The whole of docs/cli.md."""
    root = _context(cli)
    commands = cli.commands
    index = [f"- [`{name}`](#buildpy-{name}): {cmd.get_short_help_str(limit=200)}" for name, cmd in commands.items()]
    global_options = "\n".join(_options(root))
    parts = [
        "# The command line",
        f"<!-- Generated by `{COMMAND}` from build.py's help texts and stackbuild/command_exits.py: "
        "edit those, then run `make docs`; tests/docs/test_cli_reference.py fails when this file is stale. -->",
        f"`{PROG}` runs the command line of the `stackbuild` package: `python {PROG} COMMAND [OPTIONS]`, "
        f"`python {PROG} COMMAND --help` for one command's options. "
        "`-h` / `--help` on any command prints what this page says of it.",
        *_help_paragraphs(cli.help),
        global_options,
        "\n".join(index),
        *(command_section(name, cmd, root) for name, cmd in commands.items()),
        "## Output, errors and exit codes",
        "Every exit code, with what failed: the commands' (`--help` shows each command's own), and those of the "
        "image's gate, patch step and start-time pre-flight; each code has one meaning:",
        exit_code_table(),
    ]
    return "\n\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    if argv not in ([], [CHECK]):
        print(f"usage: {COMMAND} [{CHECK}]", file=sys.stderr)
        return 2
    fresh, current = reference(), REFERENCE.read_text() if REFERENCE.exists() else ""
    if fresh == current:
        return 0
    if argv == [CHECK]:
        sys.stdout.writelines(
            difflib.unified_diff(
                current.splitlines(True), fresh.splitlines(True), "docs/cli.md (as is)", "docs/cli.md (generated)"
            )
        )
        print(f"docs/cli.md is stale: run `{COMMAND}` (or `make docs`)", file=sys.stderr)
        return 1
    REFERENCE.write_text(fresh)
    print(f"rewrote {REFERENCE.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
