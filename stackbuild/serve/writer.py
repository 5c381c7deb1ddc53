"""The one way a serving file is written (compose files, node roles' files, Kubernetes manifests).

A writer gets the command's :class:`ServeTarget` (target.py: the recipe, the image it names, this
machine's values) and renders its documents; then :func:`write_documents`
runs the recipe's gate, checks every path may be written (stackbuild/core/output.py), writes every
document to a temporary file beside its path, runs the writer's checks on those files, and moves
them all in place or none (stackbuild/core/atomic.py); last, the writer's notices go to stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, TypeVar

from stackbuild.core.atomic import ReplaceFailed, replace_texts
from stackbuild.core.errors import OutputError
from stackbuild.core.gate import require_passing
from stackbuild.core.output import check_output
from stackbuild.core.recipe import Recipe

T = TypeVar("T")
MODE = 0o644  # a generated file: its owner writes it, anyone reads it


@dataclass(frozen=True)
class Document:
    """One file to write: its text, and whether a file git tracks at ``path`` may be replaced (``ours(old text)``)."""

    path: Path
    text: str
    ours: Callable[[str], bool]


def notice(message: str) -> None:
    """One notice line on stderr (stdout may carry --json)."""
    print(f"notice: {message}", file=sys.stderr)


def write_documents(
    recipe: Recipe,
    documents: Sequence[Document],
    flag: str,
    *,
    check: Optional[Callable[[Mapping[Path, Path]], T]] = None,
    notices: Sequence[str] = (),
) -> Optional[T]:
    """Gate, check the paths, write every document, ``check(temps)``, then move them all in place; print ``notices``.

    ``check`` gets each document's path -> its temporary file (in the path's directory, so a relative
    path in the file resolves as it will) and may print notices of its own; what it returns is
    returned. ``flag`` names the option the paths came from in errors (``-o``, ``compose``, ``deploy``).
    Nothing is written when the gate, a path, a write or ``check`` fails.
    """
    require_passing(recipe)
    for document in documents:
        check_output(document.path, flag, ours=document.ours)
    try:
        result = replace_texts({d.path: d.text for d in documents}, check, mode=MODE)
    except ReplaceFailed as exc:
        where = f" in {exc.path.parent}" if exc.stage == "create" else ""
        raise OutputError(f"{flag} {exc.path}: cannot write{where}: {exc.error.strerror or exc.error}") from None
    for message in notices:
        notice(message)
    return result
