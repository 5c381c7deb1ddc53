"""Replacing a file so that a reader sees the old one or the new one, never half of one."""
from __future__ import annotations

from pathlib import Path
from typing import Callable


def replace_file(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then move it over ``path``.

    The temporary file never stays behind; what ``write`` or the move raise propagates.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def replace_text(path: Path, text: str) -> None:
    """:func:`replace_file` with ``text`` as UTF-8."""
    replace_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
