"""What the installed tree holds, against the series' lock (nothing is written).

The installed version must be the series' target and every file the series
touches must have its pristine sha256 (or, as a whole, the patched one: the
series is already applied). From a pristine tree the series is applied in
memory and each result checked against the patched sha256 in the lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from .diff import patch_in_memory, touched_by
from .errors import OverlayError
from .locate import installed_version, locate_vllm
from .lock import load_patches, read_lock, sha256_bytes

PRISTINE = "pristine"  # every file the series touches is as the lock's pristine sha256 says
APPLIED = "applied"  # every such file is as the lock's patched sha256 says


@dataclass(frozen=True)
class TreeState:
    """An installed package inspected against a series."""

    lock: Mapping[str, Any]  # the series' lock.json
    site: Path  # the directory holding the package and its dist-info
    package_dir: Path
    version: str  # installed (the series' target)
    patches: tuple  # (patch name, its FilePatches), series order
    touched_by: Mapping[str, list]  # file relative to site -> names of the patches touching it
    state: str  # PRISTINE or APPLIED
    contents: Optional[Mapping[str, bytes]]  # PRISTINE: file -> its patched bytes; APPLIED: None


def inspect_tree(series_dir, vllm_dir=None, site_packages=None) -> TreeState:
    """Everything short of writing: version, hashes, in-memory application."""
    series_dir = Path(series_dir)
    lock = read_lock(series_dir)
    package, distribution = lock["package"], lock["distribution"]
    pkg = locate_vllm(package, vllm_dir, site_packages)
    site = pkg.parent
    version, meta = installed_version(pkg, distribution)
    if version != lock["version"]:
        raise OverlayError(
            f"{meta}: installed {distribution} version is {version}, the series targets {lock['version']}"
        )
    patches = tuple(load_patches(series_dir, lock))

    originals = {}
    states = {}
    errors = []
    for rel, want in sorted(lock["files"].items()):
        path = site / rel
        if not path.is_file():
            errors.append(f"{path}: missing (the series patches it)")
            continue
        data = path.read_bytes()
        got = sha256_bytes(data)
        if got == want["pristine_sha256"]:
            states[rel] = PRISTINE
        elif got == want["patched_sha256"]:
            states[rel] = APPLIED
        else:
            errors.append(
                f"{path}: sha256 {got} matches neither the pristine "
                f"({want['pristine_sha256']}) nor the patched "
                f"({want['patched_sha256']}) {distribution} {lock['version']} file"
            )
        originals[rel] = data
    if errors:
        raise OverlayError(errors)
    kinds = set(states.values())
    if kinds == {APPLIED}:
        return TreeState(lock, site, pkg, version, patches, touched_by(patches), APPLIED, None)
    if kinds != {PRISTINE}:
        half = sorted(rel for rel, s in states.items() if s == APPLIED)
        raise OverlayError([f"{site / rel}: already patched while other files are pristine" for rel in half])

    contents, touched = patch_in_memory(originals, patches)
    for rel, data in contents.items():
        want = lock["files"][rel]["patched_sha256"]
        if sha256_bytes(data) != want:
            errors.append(f"{site / rel}: patched result has sha256 {sha256_bytes(data)}, expected {want}")
    untouched = sorted(set(lock["files"]) - set(touched))
    for rel in untouched:
        errors.append(f"{site / rel}: recorded in the lock but no patch touches it")
    if errors:
        raise OverlayError(errors)
    return TreeState(lock, site, pkg, version, patches, touched, PRISTINE, contents)
