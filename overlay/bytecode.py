"""Bytecode of the changed modules.

None is written unless asked for (then hash-based ``.pyc``: deterministic), so
an image layer holds the changed sources only. A cached ``.pyc`` of a changed
module left by the base is kept only where Python is certain to reject it for
the new source (checked-hash: the source hash differs; timestamp-based: the
source size differs) and recompile; one it could load is replaced by fresh
bytecode, or removed when it belongs to another interpreter. Removing is the
last resort: a deleted file becomes a whiteout in the layer, whose time is the
build's, not the inputs'.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import OverlayError


@dataclass(frozen=True)
class BytecodePlan:
    """What happens to the bytecode of one changed source."""

    write: Optional[Path]  # the .pyc to write fresh (this interpreter's), or None
    kept: tuple  # (cached .pyc, why every Python rejects it for the new source)
    remove: tuple  # cached .pyc another interpreter could load instead of the new source


def stale_bytecode(target: Path) -> list:
    """Every cached bytecode file of ``target`` (all interpreters, legacy too)."""
    stem = target.stem
    found = []
    cache = target.parent / "__pycache__"
    if cache.is_dir():
        for entry in cache.iterdir():
            if entry.name.startswith(stem + ".") and entry.suffix == ".pyc":
                rest = entry.name[len(stem) + 1 :]
                if rest.count(".") >= 1:  # <tag>[.opt-N].pyc
                    found.append(entry)
    for legacy in (target.with_suffix(".pyc"),):
        if legacy.exists():
            found.append(legacy)
    return sorted(found)


def python_rejects(pyc: Path, new_source: bytes) -> Optional[str]:
    """Why every Python rejects cached bytecode ``pyc`` for ``new_source`` (and
    recompiles), or None if one might load it instead of the new source."""
    header = pyc.read_bytes()[:16]
    if len(header) < 16:
        return "truncated header"
    flags = int.from_bytes(header[4:8], "little")
    if flags & ~0b11:
        return "invalid flags"
    if flags & 0b1:
        if not flags & 0b10:
            return None  # unchecked hash: loaded without looking at the source
        if header[:4] == importlib.util.MAGIC_NUMBER:
            if header[8:16] == importlib.util.source_hash(new_source):
                return None
            return "checked hash of a different source"
        # Another interpreter's key: the hash is of the old source, which differs.
        return "checked hash of the old source"
    if int.from_bytes(header[12:16], "little") != len(new_source) & 0xFFFFFFFF:
        return "timestamp-based, recorded source size differs"
    return None


def plan_bytecode(source: Path, new_source: bytes, write_bytecode: bool) -> BytecodePlan:
    """The policy above for ``source`` about to hold ``new_source``."""
    pyc = Path(importlib.util.cache_from_source(str(source)))
    write = write_bytecode
    kept, remove = [], []
    for stale in stale_bytecode(source):
        if write_bytecode and stale == pyc:
            continue  # written fresh
        reason = python_rejects(stale, new_source)
        if reason:
            kept.append((stale, reason))
        elif stale == pyc:
            write = True  # replaced in place: no whiteout
        else:
            remove.append(stale)
    return BytecodePlan(pyc if write else None, tuple(kept), tuple(remove))


def check_compiles(data: bytes, final_source: Path) -> None:
    """Refuse a patched source that Python cannot compile (nothing is written)."""
    try:
        compile(data, str(final_source), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        line = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        msg = getattr(exc, "msg", None) or str(exc)
        raise OverlayError(f"{final_source}: does not compile after patching: {msg}{line}") from None


def compile_next_to(source_tmp: Path, final_source: Path, pyc: Path) -> Path:
    """Compile ``source_tmp`` (to be moved to ``final_source``) into a temporary file next
    to ``pyc``, hash-based; returns that file. A source that does not compile is refused."""
    fd, name = tempfile.mkstemp(prefix=f".{pyc.name}.", suffix=".overlay-tmp", dir=str(pyc.parent))
    os.close(fd)
    try:
        py_compile.compile(
            str(source_tmp),
            cfile=name,
            dfile=str(final_source),
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
    except py_compile.PyCompileError as exc:
        os.unlink(name)
        raise OverlayError(f"{final_source}: does not compile after patching: {exc.msg}") from None
    return Path(name)
