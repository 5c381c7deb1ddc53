"""Files the CLI writes where the user says (-o, --report): checked before anything is written.

An output goes into an existing, writable directory, and never over a file git
tracks unless that file is this command's own output for the same recipe (so
`build.py render -o README.md` or `compose -o build.py` stop instead of
overwriting the checkout).

By default the serve commands write into the repository only for its own
recipes (a recipe file git tracks there): a recipe elsewhere gets its files next
to itself. What they generate (``*.compose.yaml``, ``*.k8s.yaml``) is never a
build input, wherever it lies (stackbuild/core/context_sources.py), and a file
that holds this machine's values (``compose --models-dir``, ``--gpus``,
``--port``) is a git-ignored ``*.local.compose.yaml``, so a command run in a clean
tree leaves its pinned tag as it was.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable, Optional

from stackbuild.core.atomic import replace_text
from stackbuild.core.errors import OutputError

COMPOSE_SUFFIX = ".compose.yaml"  # `build.py compose`'s files
K8S_SUFFIX = ".k8s.yaml"  # `build.py deploy --target k8s`'s file
LOCAL_COMPOSE_SUFFIX = ".local" + COMPOSE_SUFFIX  # a compose file with this machine's values (git-ignored)
GENERATED_SUFFIXES = (COMPOSE_SUFFIX, K8S_SUFFIX)


def tracked_by_git(path: Path) -> bool:
    """Whether ``path`` is a file git tracks in the work tree that holds it (False without git)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(path.parent), "ls-files", "--error-unmatch", "--", path.name],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def repository_file(path: Path, repo: Path) -> bool:
    """Whether ``path`` is one of ``repo``'s own files: inside it and tracked by git."""
    resolved = Path(path).resolve()
    return resolved.is_relative_to(Path(repo).resolve()) and tracked_by_git(resolved)


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
            raise OutputError(
                f"{flag} {path}: git tracks this file and it is not this command's output for this recipe; "
                "write elsewhere, or remove it first (git rm) if it should be replaced"
            )
    return path


def write_text(path: Path, text: str, flag: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory (nothing half-written)."""
    try:
        replace_text(path, text)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
