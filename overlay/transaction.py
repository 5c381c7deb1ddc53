"""Writes to an installed tree, all or nothing.

New files are staged as temporary files next to their targets and moved into
place with ``os.replace`` at commit; every path touched keeps its previous
bytes and mode until the transaction ends, and a rollback restores them (also
after the commit, when a later check fails).
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import OverlayError


class Transaction:
    """Stage new files next to their targets, commit with os.replace, and
    restore every touched path's previous bytes on failure."""

    def __init__(self):
        self.staged = []  # (tmp, final)
        self.deletes = []  # paths to remove at commit
        self.saved = {}  # path -> (bytes or None, mode or None)
        self.created_dirs = []  # removed again on rollback

    def makedir(self, path: Path):
        if not path.exists():
            path.mkdir()
            self.created_dirs.append(path)

    def makedirs(self, path: Path):
        """``path`` and every missing parent, each removed again on rollback."""
        for parent in reversed(path.parents):
            if parent != parent.parent:
                self.makedir(parent)
        self.makedir(path)

    def _save(self, path: Path):
        if path in self.saved:
            return
        if path.exists():
            self.saved[path] = (path.read_bytes(), path.stat().st_mode)
        else:
            self.saved[path] = (None, None)

    def stage(self, final: Path, data: bytes = None, tmp: Path = None, mode=None):
        """Stage ``data`` (or the already written ``tmp``) to replace ``final`` at commit."""
        self._save(final)
        if tmp is None:
            fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".overlay-tmp", dir=str(final.parent))
            tmp = Path(name)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        self.staged.append((tmp, final))
        return tmp

    def delete(self, path: Path):
        self._save(path)
        self.deletes.append(path)

    def discard(self):
        for tmp, _ in self.staged:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
        self.staged = []

    def commit(self):
        for tmp, final in self.staged:
            os.replace(tmp, final)
        for path in self.deletes:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.staged = []

    def rollback(self) -> list:
        """Restore every saved path; returns paths that could not be restored."""
        self.discard()
        failed = []
        for path, (data, mode) in self.saved.items():
            try:
                if data is None:
                    if path.exists():
                        path.unlink()
                    continue
                if path.exists() and path.read_bytes() == data:
                    continue
                fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".overlay-restore", dir=str(path.parent))
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.chmod(name, mode & 0o7777)
                os.replace(name, path)
            except OSError:
                failed.append(str(path))
        for path in reversed(self.created_dirs):
            try:
                path.rmdir()
            except OSError:
                failed.append(str(path))
        return failed


@contextmanager
def all_or_nothing():
    """A Transaction rolled back if the block raises anything.

    The block's OverlayError is raised again, with a line for every path that
    could not be restored; an OSError becomes an OverlayError naming its file;
    anything else (KeyboardInterrupt too) is raised again after the rollback.
    """
    txn = Transaction()
    try:
        yield txn
    except BaseException as exc:
        failed = txn.rollback()
        if failed:
            extra = [f"{p}: could not be restored" for p in failed]
            if isinstance(exc, OverlayError):
                raise OverlayError(exc.errors + extra) from None
            raise OverlayError([f"{type(exc).__name__}: {exc}"] + extra) from None
        if isinstance(exc, OverlayError):
            raise
        if isinstance(exc, OSError):
            raise OverlayError(f"{getattr(exc, 'filename', '') or 'write'}: {exc}") from None
        raise


def write_atomically(path: Path, data: bytes) -> None:
    """``data`` at ``path`` (mode 0644, parents made), whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(name, 0o644)
    os.replace(name, path)
