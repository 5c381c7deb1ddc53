"""Replacing files so that a reader sees the old ones or the new ones, never half of one.

Each new file is written to a temporary file beside its path (same directory, so the
move is a rename), every temporary file is written (and checked) before the first move,
and a failure anywhere leaves every path as it was and no temporary file behind.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Callable, Mapping, Optional, TypeVar

T = TypeVar("T")


class ReplaceFailed(OSError):
    """An ``OSError`` while replacing ``path``, at ``stage``: ``"create"`` (the temporary file beside it),
    ``"write"`` (writing the temporary file) or ``"move"`` (moving it over ``path``)."""

    def __init__(self, path: Path, stage: str, error: OSError):
        super().__init__(error.errno, error.strerror or str(error), error.filename)
        self.path = path
        self.stage = stage
        self.error = error


def _temporary(path: Path) -> Path:
    """A new, empty file ``.<name>.<random>.tmp`` beside ``path`` (mode 0666 less the umask, as ``open`` makes)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue


def _keep(path: Path) -> Optional[Path]:
    """A second name for the file at ``path`` (a hard link, else a copy) to put back; None when there is none."""
    if not path.exists():
        return None
    keep = _temporary(path)
    keep.unlink()
    try:
        os.link(path, keep)
    except OSError:
        shutil.copy2(path, keep)
    return keep


def replace_files(
    writes: Mapping[Path, Callable[[Path], None]],
    check: Optional[Callable[[Mapping[Path, Path]], T]] = None,
    *,
    mode: Optional[int] = None,
) -> Optional[T]:
    """Replace every path of ``writes`` with what its ``write(tmp)`` writes, all of them or none.

    Every ``write(tmp)`` runs first (``mode``, when given, is then set on each temporary file), then
    ``check(temps)`` with each path's temporary file (path -> tmp), then each temporary file is moved
    over its path; what ``check`` returns is returned. When a write, the check or a move raises, no
    path is left changed (paths moved before a failed move get their previous file back) and no
    temporary file stays behind. An ``OSError`` of creating, writing or moving is a
    :class:`ReplaceFailed`; what ``write`` or ``check`` raise otherwise propagates.
    """
    paths = [Path(p) for p in writes]
    temps: dict[Path, Path] = {}
    kept: dict[Path, Optional[Path]] = {}
    moved: list[Path] = []
    try:
        for path, write in zip(paths, writes.values()):
            try:
                temps[path] = _temporary(path)
            except OSError as exc:
                raise ReplaceFailed(path, "create", exc) from None
            try:
                write(temps[path])
                if mode is not None:
                    os.chmod(temps[path], mode)
            except OSError as exc:
                raise ReplaceFailed(path, "write", exc) from None
        result = check(temps) if check is not None else None
        for path in paths:
            try:
                if len(paths) > 1:
                    kept[path] = _keep(path)
                temps[path].replace(path)
            except OSError as exc:
                raise ReplaceFailed(path, "move", exc) from None
            moved.append(path)
        return result
    except BaseException:
        for path in reversed(moved):
            keep = kept.get(path)
            if keep is None:
                path.unlink(missing_ok=True)
            else:
                keep.replace(path)
        raise
    finally:
        for tmp in [*temps.values(), *(k for k in kept.values() if k is not None)]:
            tmp.unlink(missing_ok=True)


def replace_file(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then move it over ``path``.

    The temporary file never stays behind; what ``write`` or the move raise propagates.
    """
    try:
        replace_files({Path(path): write})
    except ReplaceFailed as exc:
        raise exc.error from None


def replace_text(path: Path, text: str) -> None:
    """:func:`replace_file` with ``text`` as UTF-8."""
    replace_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def replace_texts(
    texts: Mapping[Path, str], check: Optional[Callable[[Mapping[Path, Path]], T]] = None, *, mode: Optional[int] = None
) -> Optional[T]:
    """:func:`replace_files` with each path's text as UTF-8."""
    writes = {Path(p): (lambda tmp, t=text: tmp.write_text(t, encoding="utf-8")) for p, text in texts.items()}
    return replace_files(writes, check, mode=mode)
