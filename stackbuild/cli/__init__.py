"""The command line: build, pin, check, push and serve a vLLM overlay image from a stack recipe.

Run as ``python build.py COMMAND`` from the checkout. Every command, option and exit code is in
docs/cli.md, which tools/cli_reference.py writes from this package's help texts and
stackbuild/command_exits.py.

This module is the command group: how a failure is printed and exits, and which commands it holds.
The commands live by stage: image.py (render, lock, record, build, push, index), gate.py (geometry,
fit), serve.py (compose, deploy, preflight, pin), up.py (up) and checks.py (verify, qualify); each parses its
options, calls its stage (stackbuild/image/, stackbuild/serve/, stackbuild/core/) and prints the result.
"""

from __future__ import annotations

import sys

import click

from geometry import one_line
from stackbuild.cli.checks import qualify, verify
from stackbuild.cli.gate import fit, geometry
from stackbuild.cli.image import build, index, lock, push, record, render
from stackbuild.cli.output import json_failure
from stackbuild.cli.serve import compose, deploy, pin, preflight
from stackbuild.cli.up import up
from stackbuild.command_exits import COMMAND_EXITS
from stackbuild.core.errors import InternalError, StackBuildError

WANTS_JSON = "wants_json"  # ctx.meta: --json is among the command's own arguments


class Cli(click.Group):
    """Turns every failure into one line on stderr and its exit code (stackbuild/core/errors.py);
    verify's findings follow its line, one per line.

    Usage errors (click's) exit 2; an exception nobody expected is an internal error (exit 70)
    asking for a report, never a traceback.
    """

    def make_context(self, info_name, args, parent=None, **extra):
        wants_json = "--json" in _before_separator(args)
        try:
            ctx = super().make_context(info_name, args, parent=parent, **extra)
            ctx.meta[WANTS_JSON] = wants_json
            return ctx
        except click.exceptions.NoArgsIsHelpError as exc:  # a bare `build.py`: its help, not an error
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.UsageError as exc:  # an option of build.py itself
            click.echo(f"error: {info_name}: {one_line(exc.format_message())} (see {info_name} --help)", err=True)
            sys.exit(exc.exit_code)

    def invoke(self, ctx):
        wants_json = ctx.meta.get(WANTS_JSON, False)
        try:
            return super().invoke(ctx)
        except StackBuildError as exc:
            if exc.lists_findings:
                head, *findings = str(exc).splitlines() or [""]
                click.echo("\n".join([f"error: {one_line(head)}", *(f"  {one_line(f)}" for f in findings)]), err=True)
            else:
                click.echo(f"error: {one_line(exc)}", err=True)
            json_failure(ctx, wants_json, exc.exit_code, str(exc).splitlines()[0] if str(exc) else "")
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:
            sub = exc.ctx.command_path if exc.ctx else ctx.command_path
            click.echo(f"error: {sub}: {one_line(exc.format_message())} (see {sub} --help)", err=True)
            json_failure(ctx, wants_json, exc.exit_code, f"{sub}: {exc.format_message()}")
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
            error = InternalError(
                f"internal error: {type(exc).__name__}: {one_line(exc)[:300]}; please report it with the command line"
            )
            click.echo(f"error: {error}", err=True)
            json_failure(ctx, wants_json, error.exit_code, str(error))
            ctx.exit(error.exit_code)


def _before_separator(args) -> list[str]:
    """The arguments before ``--`` (what follows is passed on, e.g. preflight's serve args)."""
    args = list(args)
    return args[: args.index("--")] if "--" in args else args


def _print_version(ctx, _param, value) -> None:
    if not value or ctx.resilient_parsing:
        return
    from stackbuild.core.version import versions

    click.echo(versions().text())
    ctx.exit(0)


@click.group(cls=Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="This project's version, the checkout's commit and the vLLM release the gate models.",
)
def cli() -> None:
    """Build the GLM-5.3-Flash + DFlash2 vLLM image from a stack recipe, check its KV geometry,
    push it, and generate and check what serves it.

    It reads the recipes, Dockerfile.j2 and the git revision from this checkout (`make install`
    installs it into the venv, editable). A bare `build.py` prints this help.

    `--json` writes one machine-readable object on stdout (progress stays on stderr), on failure
    too: `{"ok": false, "exit_code": N, "error": "..."}` unless the command printed its own object
    first (geometry's report, preflight's checks, which carry the verdict).

    An error is one line on stderr (`error: ...`) naming the file, key, flag, step or patch at
    fault, never a traceback, with a distinct exit code per kind; a value given by a flag or the
    environment is blamed on that flag or variable, with the fix when there is one (`--owner
    'Acme'`: use 'acme'). A step that takes more than a second says so on stderr before it starts
    (compose and deploy import vLLM for the serve-parser check: 10-20 s, skipped for a command line
    the same vLLM installation passed before, kept in $GLM53_CACHE_DIR, else ~/.cache/glm53); gate
    reasons that repeat for layers alike are one reason with their count (`[5x: also ... to ...]`).

    Nothing is written when a command fails (outputs go through a temporary file in the target
    directory), and nothing is tagged or pushed after a failed step. Generated files
    (`*.compose.yaml`, `*.k8s.yaml`) are never build inputs: nothing these commands write into a clean
    tree changes its pinned tag. The image's start-time pre-flight exits with the same codes as
    `build.py preflight` for the same faults.
    """


# The commands in the order their help and docs/cli.md list them.
for _command in (
    render,
    lock,
    record,
    geometry,
    fit,
    build,
    push,
    index,
    compose,
    up,
    deploy,
    preflight,
    pin,
    verify,
    qualify,
):
    cli.add_command(_command)

# Each command's help ends with the exit codes it returns (stackbuild/command_exits.py); a command
# without an entry there stops the import.
for _name, _command in cli.commands.items():
    _command.epilog = COMMAND_EXITS[_name].epilog()
cli.epilog = "Each command's --help lists the exit codes it returns; all of them: docs/cli.md."


def main() -> None:
    """Entry point of ``build.py``."""
    cli()
