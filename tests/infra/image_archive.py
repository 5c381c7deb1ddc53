"""An image made of layer tarballs: the layers (write_layers), their diff ids and the image config.

`docker import` would record the engine's own architecture and one layer; a config written here
records the real architecture, the entrypoint and the labels, and takes the layers as they are,
so two images built on the same rootfs tarball share its layer in the engine and the registry
(image_publish.py pushes them). A layer's sha256 (its diff id) is kept beside it
(`LAYER.sha256`), so a cached layer is hashed once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CREATED = "2025-11-30T00:00:00Z"
# Layers a Python tree is spread over (write_layers): a push compresses them side by side.
LAYER_PARTS = 2
# The environment every synthetic base sets.
BASE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "PYTHONUNBUFFERED=1")


def log(msg: str) -> None:
    print(f"[image_archive] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Layer:
    """A layer tarball and the history line that says what it holds."""

    path: Path
    created_by: str


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an image config the synthetic bases set."""

    arch: str
    entrypoint: tuple[str, ...]
    env: tuple[str, ...] = BASE_ENV
    labels: dict = field(default_factory=dict)
    exposed_ports: tuple[str, ...] = ()


def file_digest(path: Path) -> str:
    """sha256:... of a file (a layer tarball, a compressed blob), kept beside it as FILE.sha256 and
    read from there while that is newer than the file."""
    kept = path.with_name(path.name + ".sha256")
    if kept.exists() and kept.stat().st_mtime >= path.stat().st_mtime:
        return kept.read_text().strip()
    t0 = time.time()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    digest = "sha256:" + h.hexdigest()
    # Two builds may hash a shared file at once: each writes its own part, the rename is whole.
    fd, part = tempfile.mkstemp(dir=path.parent, prefix=kept.name, suffix=".part")
    with os.fdopen(fd, "w") as out:
        out.write(digest + "\n")
    os.replace(part, kept)
    log(f"hashed {path.name} ({path.stat().st_size >> 20} MiB) in {time.time() - t0:.0f} s")
    return digest


def config_document(config: ImageConfig, layers: list[Layer], diff_ids: list[str]) -> bytes:
    document = {
        "architecture": config.arch,
        "os": "linux",
        **({"variant": "v8"} if config.arch == "arm64" else {}),
        "created": CREATED,
        "config": {
            "Env": list(config.env),
            "Entrypoint": list(config.entrypoint),
            "WorkingDir": "/",
            "Labels": dict(config.labels),
            **({"ExposedPorts": {port: {} for port in config.exposed_ports}} if config.exposed_ports else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": CREATED, "created_by": layer.created_by} for layer in layers],
    }
    return json.dumps(document, sort_keys=True).encode()


def tree_size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def write_layers(stage: Path, site: str, out_dir: Path, parts: int) -> list[Path]:
    """The staged tree as ``parts`` layer tarballs in out_dir (0.tar, 1.tar, ...), site's packages
    spread over them by size: the engine compresses the layers of a push side by side, one core
    each, where one layer would take one core for the whole image.

    Layer 0 holds everything outside ``site`` too. Written under out_dir's name + ".part", then
    renamed, so out_dir exists only whole.
    """
    sizes = {entry.name: tree_size(entry) for entry in (stage / site).iterdir()}
    bins: list[list[str]] = [[] for _ in range(parts)]
    totals = [0] * parts
    for name in sorted(sizes, key=sizes.get, reverse=True):
        smallest = totals.index(min(totals))
        bins[smallest].append(f"{site}/{name}")
        totals[smallest] += sizes[name]
    part_dir = out_dir.with_name(out_dir.name + ".part")
    shutil.rmtree(part_dir, ignore_errors=True)
    part_dir.mkdir(parents=True)
    tar = ["tar", "--numeric-owner", "--owner=0", "--group=0", "-C", str(stage)]
    others = [path for index in range(1, parts) for path in bins[index]]
    top = sorted(child.name for child in stage.iterdir())
    excludes = [f"--exclude={path}" for path in others]
    subprocess.run([*tar, "--anchored", *excludes, "-cf", str(part_dir / "0.tar"), *top], check=True)
    for index in range(1, parts):
        subprocess.run([*tar, "-cf", str(part_dir / f"{index}.tar"), *bins[index]], check=True)
    part_dir.rename(out_dir)
    log(f"{out_dir.name}: {parts} layers of " + ", ".join(f"{total >> 20} MiB" for total in totals))
    return layer_files(out_dir)


def layer_files(out_dir: Path) -> list[Path]:
    """The layer tarballs write_layers left in out_dir, in layer order."""
    return sorted(out_dir.glob("*.tar"), key=lambda path: int(path.stem))
