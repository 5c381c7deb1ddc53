"""Files the CLI writes where the user says (-o, --report): checked before anything is written.

An output goes into an existing, writable directory, and never over a file git
tracks unless that file is this command's own output for the same recipe (so
`build.py render -o README.md` or `compose -o build.py` stop instead of
overwriting the checkout).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable, Optional

from stackbuild.core.atomic import replace_text
from stackbuild.core.errors import OutputError


def tracked_by_git(path: Path) -> bool:
    """Whether ``path`` is a file git tracks in the work tree that holds it (False without git)."""
    try:
        proc = subprocess.run(["git", "-C", str(path.parent), "ls-files", "--error-unmatch", "--", path.name],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def check_output(path: Path, flag: str, *, ours: Optional[Callable[[str], bool]] = None) -> Path:
    """Raise :class:`OutputError` unless ``path`` can be written; ``ours(text)`` says a tracked file may be replaced."""
    path = Path(path)
    parent = path.parent.resolve() if str(path.parent) else Path.cwd()
    if not parent.is_dir():
        raise OutputError(f"{flag} {path}: directory {parent} does not exist (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: directory {parent} is not writable")
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a directory")
    if path.exists() and tracked_by_git(path):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = ""
        if ours is None or not ours(text):
            raise OutputError(f"{flag} {path}: git tracks this file and it is not this command's output for this recipe; "
                              "write elsewhere, or remove it first (git rm) if it should be replaced")
    return path


def write_text(path: Path, text: str, flag: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory (nothing half-written)."""
    try:
        replace_text(path, text)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
