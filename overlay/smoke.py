"""Importing the patched modules in a fresh interpreter (``--smoke-import``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .errors import OverlayError
from .manifest import module_name


def smoke_import(site: Path, rels) -> None:
    """Import every Python file of ``rels`` (relative to ``site``) from ``site``; refuse on any failure."""
    modules = [module_name(rel) for rel in sorted(rels) if rel.endswith(".py")]
    code = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(site)!r})\n"
        f"for m in {modules!r}:\n"
        "    mod = importlib.import_module(m)\n"
        f"    assert mod.__file__.startswith({str(site)!r}), (m, mod.__file__)\n"
    )
    # No bytecode for the rest of vLLM (it would leave files the rollback does not
    # own and bloat the layer), and a neutral working directory: run from inside
    # the package, its submodules would also import as top-level modules.
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise OverlayError(f"smoke import of {', '.join(modules)} failed: {tail}")
