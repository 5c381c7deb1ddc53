"""Byte-compile a staged Python tree on the host, each source compiled once per machine.

A ``.pyc`` depends only on CPython's bytecode version, the path its source is installed at (it
names that path in tracebacks) and the source itself. The bases install many identical files at
identical paths (vLLM 0.33.0's tree in the amd64 and arm64 bases; transformers, sympy and the
like in the serving base too), so each compiled file is kept in $INFRA_CACHE_DIR/pyc under a hash
of those three and copied from there the next time.

The bases build at the same time: one walks its tree forward and another backward (``reverse``),
so where their files are the same each finds, past the middle, what the other compiled.

The files are checked-hash ``.pyc``: the interpreter compares the source's hash, so a file an
overlay edits later is recompiled, never run stale.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import py_compile
import re
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import harness  # tests/infra, this script's directory

CACHE = harness.CACHE_DIR / "pyc"
# Test trees are never imported by what the images run.
SKIPPED = re.compile(r"/tests?/")


@dataclass(frozen=True)
class Compiled:
    """What compile_tree did: files taken from the cache, compiled, and not compilable."""

    cached: int
    compiled: int
    failed: int


def _key(installed_at: str, source: bytes) -> str:
    h = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    h.update(installed_at.encode() + b"\0")
    h.update(source)
    return h.hexdigest()


def _compile_one(job: tuple[str, str]) -> str:
    """'cached', 'compiled' or 'failed' for one source file (staged path, installed path)."""
    staged, installed_at = job
    key = _key(installed_at, Path(staged).read_bytes())
    kept = CACHE / key[:2] / f"{key}.pyc"
    target = importlib.util.cache_from_source(staged)
    if kept.exists():
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(kept, target)
        return "cached"
    try:
        py_compile.compile(
            staged,
            cfile=target,
            dfile=installed_at,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
    except (py_compile.PyCompileError, SyntaxError, ValueError, UnicodeDecodeError):
        return "failed"  # a file no interpreter of this version can import (Python 2 examples and the like)
    kept.parent.mkdir(parents=True, exist_ok=True)
    fd, part = tempfile.mkstemp(dir=kept.parent, suffix=".part")
    os.close(fd)
    shutil.copyfile(target, part)
    os.replace(part, kept)
    return "compiled"


def compile_tree(stage: Path, tree: str, *, reverse: bool = False) -> Compiled:
    """Compile every .py under stage/tree to its __pycache__, as installed at /tree (stage is /).

    The host's CPython must be the images' (its bytecode is what they load).
    """
    jobs = []
    for path in sorted((stage / tree).rglob("*.py")):
        installed_at = "/" + path.relative_to(stage).as_posix()
        if path.is_file() and not SKIPPED.search(installed_at):
            jobs.append((str(path), installed_at))
    if reverse:
        jobs.reverse()
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        outcomes = list(pool.map(_compile_one, jobs, chunksize=32))
    return Compiled(outcomes.count("cached"), outcomes.count("compiled"), outcomes.count("failed"))
