"""What a command prints on stdout: its one JSON object with --json, else its text; with --json a failure
is one object too, unless the command printed its own first."""

from __future__ import annotations

import json

import click

from geometry import one_line

JSON_PRINTED = "json_printed"  # ctx.meta: the command has printed its one JSON object


def print_json(data: dict) -> None:
    """A command's one JSON object on stdout (a failure after it adds no second one)."""
    click.echo(json.dumps(data, indent=2, sort_keys=True))
    click.get_current_context().meta[JSON_PRINTED] = True


def emit(as_json: bool, data: dict, text: str) -> None:
    if as_json:
        print_json(data)
    else:
        click.echo(text)


def json_failure(ctx, wants_json: bool, exit_code: int, error: str) -> None:
    """With ``--json``, a failure is still one object on stdout: ``{ok, exit_code, error}``, unless
    the command printed its own (the geometry table, the pre-flight's checks) before failing."""
    if wants_json and not ctx.meta.get(JSON_PRINTED):
        click.echo(
            json.dumps({"ok": False, "exit_code": exit_code, "error": one_line(error)}, indent=2, sort_keys=True)
        )
