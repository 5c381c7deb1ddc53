"""The geometry-wide error type and one-line error text (stdlib only)."""

from __future__ import annotations


class BadInput(ValueError):
    """The inputs are malformed or ask for something the simulator does not
    model (exit code 3 of the CLI)."""


def one_line(text: object) -> str:
    """``text`` (an exception's or a tool's message) with every run of whitespace, newlines
    included, one space: an error fits on one line."""
    return " ".join(str(text).split())
