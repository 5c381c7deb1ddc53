#!/usr/bin/env python3
"""Maintainer script: recompute the series lock from a pristine vLLM tree.

    python -m tools.refresh_lock [--pristine DIR] [--series DIR] [--check]

(from the repository root, or anywhere once the project is installed).

DIR holds the package directory (``vllm/``) and the dist-info exactly as unpacked
from the PyPI wheel the series' ``distribution`` file names (``make -f
tools/pristine.mk pristine SERIES=<name>`` puts them in ``.cache/<name>``; see
``tools.pristine``). It records the distribution, its version and the source, and for
every file the series touches the pristine sha256 and the sha256 after applying the whole
series (strictly, with the applier's own code: overlay.diff), plus each patch's sha256, in
``lock.json``. Hashes are never typed by hand.

``--check`` only compares and exits 1 if ``lock.json`` is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from overlay.diff import parse_patch, patch_in_memory
from overlay.errors import OverlayError
from overlay.locate import installed_version, locate_vllm
from overlay.lock import LOCK_FILE, default_series, read_series, series_sha256, sha256_bytes
from tools.pristine import pristine_dir, read_base


def compute_lock(series_dir: Path, pristine: Path) -> dict:
    series_dir, pristine = Path(series_dir), Path(pristine)
    base = read_base(series_dir)
    package, version = base.package, base.version
    pkg = locate_vllm(package, vllm_dir=pristine / package)
    got_version, meta = installed_version(pkg, base.distribution)
    if got_version != version:
        raise OverlayError(f"{meta}: pristine tree is {base.distribution} {got_version}, series is {version}")
    patches = []
    patch_hashes = {}
    for patch_name in read_series(series_dir):
        data = (series_dir / patch_name).read_bytes()
        patch_hashes[patch_name] = sha256_bytes(data)
        patches.append((patch_name, parse_patch(data, patch_name)))
    originals = {}
    for _, file_patches in patches:
        for fp in file_patches:
            path = pristine / fp.path
            if not path.is_file():
                raise OverlayError(f"{path}: not in the pristine tree")
            originals[fp.path] = path.read_bytes()
    contents, _ = patch_in_memory(originals, patches)
    return {
        "package": package,
        "distribution": base.distribution,
        "version": version,
        "source": f"PyPI wheel {base.requirement} (unpacked)",
        "files": {
            rel: {
                "pristine_sha256": sha256_bytes(originals[rel]),
                "patched_sha256": sha256_bytes(contents[rel]),
            }
            for rel in sorted(originals)
        },
        "patches": patch_hashes,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", help="series directory (default: lock.default_series)")
    parser.add_argument("--pristine", help="dir with vllm/ and its dist-info")
    parser.add_argument("--check", action="store_true", help="exit 1 if lock.json is stale")
    args = parser.parse_args(argv)
    try:
        series_dir = Path(args.series or default_series()).resolve()
        pristine = Path(args.pristine) if args.pristine else pristine_dir(series_dir)
        lock = compute_lock(series_dir, pristine)
    except OverlayError as exc:
        for line in exc.errors:
            print(f"refresh: error: {line}", file=sys.stderr)
        return 1
    text = json.dumps(lock, indent=2, sort_keys=True) + "\n"
    lock_path = series_dir / LOCK_FILE
    if args.check:
        current = lock_path.read_text(encoding="utf-8") if lock_path.exists() else ""
        if current != text:
            print(f"refresh: {lock_path} is stale; run python -m tools.refresh_lock", file=sys.stderr)
            return 1
        print(f"refresh: {lock_path} is up to date")
        return 0
    lock_path.write_text(text, encoding="utf-8")
    print(f"refresh: wrote {lock_path} ({len(lock['files'])} files, {len(lock['patches'])} patches)")
    print(f"series_sha256 {series_sha256(series_dir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
