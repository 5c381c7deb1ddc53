"""The overlay manifest: what the patch step applied (``OverlayManifest``).

Written by the patch step (``overlay/apply.py --manifest``, the one writer) to
``manifest.json`` under the image's payload root; read by the in-image gate and
the start-time pre-flight (geometry/gate_main.py) and by the SBOM's in-image
inventory. The patch step runs before the rest of the project is in the image,
so the definition lives here, standard library only, and its readers import it
from ``overlay.manifest`` (the payload root is on their ``sys.path``).
``from_json`` rejects any other shape with one ``ManifestError`` naming the
file and the key at fault.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping

from .json_shape import exact_keys, json_object, strings, typed

MANIFEST_SCHEMA = "glm53-overlay-manifest/1"
# The patch that makes vLLM fit the drafter's block to the target's page: the
# series counts as applied (the installed vLLM behaves as "overlay") when it is listed.
DRAFT_BLOCK_FIT_PATCH = "fit-draft-block-size"


class ManifestError(ValueError):
    """A manifest that does not have the shape the patch step writes."""


def module_name(rel: str) -> str:
    """The module name of a Python file relative to site-packages (``vllm/x/__init__.py``: ``vllm.x``)."""
    parts = rel[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@dataclass(frozen=True)
class ManifestPatch:
    name: str
    sha256: str


@dataclass(frozen=True)
class ManifestFile:
    file: str  # relative to site-packages, e.g. vllm/v1/core/kv_cache_utils.py
    sha256_before: str
    sha256_after: str
    patches: tuple[str, ...]


@dataclass(frozen=True)
class OverlayManifest:
    """What the patch step applied, written by overlay/apply.py --manifest."""

    schema: str
    package: str
    version: str
    package_dir: str
    series: str
    series_sha256: str
    patches: tuple[ManifestPatch, ...]
    files: tuple[ManifestFile, ...]
    bytecode: tuple[str, ...]
    stale_bytecode: Mapping[str, tuple[Any, ...]]  # "kept" (file, why) and "removed" (files)
    python: str

    @property
    def draft_block_fit_applied(self) -> bool:
        return any(DRAFT_BLOCK_FIT_PATCH in p.name for p in self.patches)

    def patched_modules(self) -> list[str]:
        """The module names of the Python files the series patched."""
        return [module_name(entry.file) for entry in self.files if entry.file.endswith(".py")]

    def to_json(self) -> dict:
        return {
            "schema": self.schema,
            "package": self.package,
            "version": self.version,
            "package_dir": self.package_dir,
            "series": self.series,
            "series_sha256": self.series_sha256,
            "patches": [{"name": p.name, "sha256": p.sha256} for p in self.patches],
            "files": [
                {
                    "file": f.file,
                    "sha256_before": f.sha256_before,
                    "sha256_after": f.sha256_after,
                    "patches": list(f.patches),
                }
                for f in self.files
            ],
            "bytecode": list(self.bytecode),
            "stale_bytecode": {key: list(value) for key, value in self.stale_bytecode.items()},
            "python": self.python,
        }

    def to_bytes(self) -> bytes:
        """The manifest file's bytes: sorted keys, two-space indent, a final newline."""
        return (json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: Any, where: str = "overlay manifest") -> "OverlayManifest":
        data = _object(data, where)
        _keys(data, cls, where)
        if data["schema"] != MANIFEST_SCHEMA:
            raise ManifestError(f"{where}: schema: {data['schema']!r}, expected {MANIFEST_SCHEMA!r}")
        strings = {
            key: _typed(data, key, str, where)
            for key in ("schema", "package", "version", "package_dir", "series", "series_sha256", "python")
        }
        patches = []
        for i, raw in enumerate(_typed(data, "patches", list, where)):
            at = f"{where}: patches[{i}]"
            raw = _object(raw, at)
            _keys(raw, ManifestPatch, at)
            patches.append(ManifestPatch(_typed(raw, "name", str, at), _typed(raw, "sha256", str, at)))
        files = []
        for i, raw in enumerate(_typed(data, "files", list, where)):
            at = f"{where}: files[{i}]"
            raw = _object(raw, at)
            _keys(raw, ManifestFile, at)
            files.append(
                ManifestFile(
                    _typed(raw, "file", str, at),
                    _typed(raw, "sha256_before", str, at),
                    _typed(raw, "sha256_after", str, at),
                    _strings(raw, "patches", at),
                )
            )
        stale = _object(data["stale_bytecode"], f"{where}: stale_bytecode")
        if sorted(stale) != ["kept", "removed"]:
            raise ManifestError(f"{where}: stale_bytecode: expected the keys kept and removed, got {sorted(stale)}")
        return cls(
            patches=tuple(patches),
            files=tuple(files),
            bytecode=_strings(data, "bytecode", where),
            stale_bytecode={key: tuple(_typed(stale, key, list, f"{where}: stale_bytecode")) for key in stale},
            **strings,
        )


_object = partial(json_object, ManifestError)
_keys = partial(exact_keys, ManifestError)
_typed = partial(typed, ManifestError)
_strings = partial(strings, ManifestError)
