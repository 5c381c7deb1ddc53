"""What the installed vLLM carries: the overlay manifest the patch step wrote (read as
overlay.manifest.OverlayManifest), whether the draft-block-fit series is applied, and the patched
modules to import (stdlib only; ``import_patched`` imports vLLM's)."""

from __future__ import annotations

import importlib
import os

from overlay.json_shape import read_json
from overlay.manifest import OverlayManifest


def read_manifest(manifest_path: str) -> OverlayManifest | None:
    """The overlay manifest at ``manifest_path``; None if there is none (stock vLLM)."""
    if not os.path.exists(manifest_path):
        return None
    return OverlayManifest.from_json(read_json(ValueError, manifest_path), f"overlay manifest {manifest_path}")


def overlay_applied(manifest_path: str) -> tuple[bool, str]:
    manifest = read_manifest(manifest_path)
    if manifest is None:
        return False, f"no overlay manifest at {manifest_path}: stock vLLM"
    applied = manifest.draft_block_fit_applied
    return applied, (
        f"overlay manifest {manifest_path}: draft-block-fit series {'applied' if applied else 'NOT applied'}"
    )


def patched_modules(manifest_path: str) -> list[str]:
    """The module names of the Python files the overlay manifest lists (the patched files)."""
    manifest = read_manifest(manifest_path)
    if manifest is None:
        raise ValueError(f"overlay manifest {manifest_path}: no such file")
    return manifest.patched_modules()


def import_patched(modules: list[str]) -> None:
    """Import every module the overlay manifest lists (``patched_modules``).

    The gate's process imports vLLM anyway; doing the overlay's import smoke
    test here saves a second cold import of vLLM and torch per build (minutes
    under arm64 emulation). Raises ImportError naming the module at fault.
    """
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise ImportError(f"smoke import of patched module {name} failed: {type(exc).__name__}: {exc}") from exc
