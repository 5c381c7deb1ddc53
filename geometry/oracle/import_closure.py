"""The modules an entry point imports, transitively, read from their source (stdlib only).

What ships in the image is the import closure of its entry points (the render copies exactly
that), and the oracle record's key hashes the gate's (``oracle/record.py``): both read it from
the files with this one function, so the host and the image see the same set of modules.

Every import statement counts, at any depth (function bodies, ``try``, ``if``); importing
``a.b.c`` counts ``a/__init__.py`` and ``a/b/__init__.py`` too; ``from P import name`` counts
``P.name`` when that is a module. A module not found under the root (the standard library,
vLLM, torch) is left out, and so is a name only imported by string (``importlib``). A module
that does not parse imports nothing (it is still part of the closure).
"""

from __future__ import annotations

import ast
import os
from typing import Iterable, Iterator, Optional


def module_path(root: str, name: str) -> Optional[str]:
    """The path (relative to ``root``, ``/``-separated) of module ``name`` under ``root``; None if absent."""
    base = name.replace(".", "/")
    for relative in (f"{base}/__init__.py", f"{base}.py"):
        if os.path.isfile(os.path.join(root, relative)):
            return relative
    return None


def _module_name(relative: str) -> tuple[str, str]:
    """The dotted name of the module at ``relative`` and the package relative imports start from."""
    parts = relative[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _imported(root: str, relative: str) -> Iterator[str]:
    """Every dotted name an import statement of the module at ``relative`` may load."""
    with open(os.path.join(root, relative), "rb") as fh:
        source = fh.read()
    try:
        tree = ast.parse(source, filename=relative)
    except (SyntaxError, ValueError):  # it ships as it is and fails where Python runs it
        return
    _, package = _module_name(relative)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".") if package else []
                if node.level - 1 > len(anchor):
                    continue
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base:
                yield base
                yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def _with_packages(name: str) -> Iterator[str]:
    parts = name.split(".")
    for end in range(1, len(parts) + 1):
        yield ".".join(parts[:end])


def import_closure(root: str | os.PathLike, entries: Iterable[str]) -> tuple[str, ...]:
    """``entries`` (paths of modules under ``root``) and every module under ``root`` they import,
    transitively: their paths relative to ``root``, ``/``-separated, sorted."""
    root = os.fspath(root)
    seen: set[str] = set()
    todo = []
    for entry in entries:
        _, package = _module_name(entry)
        todo.append(entry)
        if package:  # a module run with -m imports its packages first
            todo += [found for found in (module_path(root, p) for p in _with_packages(package)) if found]
    while todo:
        relative = todo.pop()
        if relative in seen:
            continue
        seen.add(relative)
        for name in _imported(root, relative):
            for part in _with_packages(name):
                found = module_path(root, part)
                if found and found not in seen:
                    todo.append(found)
    return tuple(sorted(seen))
