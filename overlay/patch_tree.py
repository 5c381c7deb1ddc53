"""Apply a series to an installed tree: all patches or none.

``inspect_tree`` checks the tree and applies the series in memory; then every
new source is compiled (a patch that leaves a syntax error is refused) and
staged next to its target with its bytecode (``bytecode``) and the manifest,
all moved into place in one transaction, re-read and re-hashed. Any failure,
a failed smoke import after the move included, restores every touched path.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from .bytecode import check_compiles, compile_next_to, plan_bytecode
from .errors import OverlayError
from .lock import series_sha256, sha256_file
from .manifest import MANIFEST_SCHEMA, ManifestFile, ManifestPatch, OverlayManifest
from .smoke import smoke_import
from .transaction import all_or_nothing, write_atomically
from .tree import APPLIED, TreeState, inspect_tree


def manifest_of(
    tree: TreeState, series_dir: Path, bytecode: list, stale_report: Optional[dict] = None
) -> OverlayManifest:
    """The manifest of ``tree`` once the series is applied."""
    lock = tree.lock
    stale = stale_report or {"kept": [], "removed": []}
    return OverlayManifest(
        schema=MANIFEST_SCHEMA,
        package=lock["package"],
        version=tree.version,
        package_dir=str(tree.package_dir),
        series=str(series_dir),
        series_sha256=series_sha256(series_dir),
        patches=tuple(ManifestPatch(name, lock["patches"][name]) for name, _ in tree.patches),
        files=tuple(
            ManifestFile(
                rel,
                lock["files"][rel]["pristine_sha256"],
                lock["files"][rel]["patched_sha256"],
                tuple(tree.touched_by.get(rel, ())),
            )
            for rel in sorted(lock["files"])
        ),
        bytecode=tuple(sorted(bytecode)),
        stale_bytecode={key: tuple(value) for key, value in stale.items()},
        python=sys.version.split()[0],
    )


def apply_series(
    series_dir, vllm_dir=None, site_packages=None, manifest=None, check=False, smoke=False, write_bytecode=False
) -> dict:
    """Check (``check``) or apply the series; the result is the command line's JSON."""
    series_dir = Path(series_dir).resolve()
    tree = inspect_tree(series_dir, vllm_dir, site_packages)
    site = tree.site
    result = {
        "ok": True,
        "version": tree.version,
        "package_dir": str(tree.package_dir),
        "series_sha256": series_sha256(series_dir),
        "files": sorted(tree.lock["files"]),
    }
    if check:
        result["action"] = "check"
        result["state"] = tree.state
        if smoke and tree.state == APPLIED:
            smoke_import(site, tree.lock["files"])
        return result
    if tree.state == APPLIED:
        result["action"] = "already-applied"
        if smoke:
            smoke_import(site, tree.lock["files"])
        if manifest:
            write_atomically(Path(manifest), manifest_of(tree, series_dir, []).to_bytes())
            result["manifest"] = str(manifest)
        return result

    bytecode, stale_report = [], {"kept": [], "removed": []}
    with all_or_nothing() as txn:
        for rel, data in sorted(tree.contents.items()):
            final = site / rel
            tmp = txn.stage(final, data, mode=final.stat().st_mode)
            plan = plan_bytecode(final, data, write_bytecode)
            for stale, reason in plan.kept:
                stale_report["kept"].append({"file": str(stale.relative_to(site)), "rejected": reason})
            for stale in plan.remove:
                txn.delete(stale)
                stale_report["removed"].append(str(stale.relative_to(site)))
            if plan.write is None:
                check_compiles(data, final)  # compiling the bytecode checks it otherwise
                continue
            txn.makedir(plan.write.parent)
            txn.stage(plan.write, tmp=compile_next_to(tmp, final, plan.write), mode=0o644)
            bytecode.append(str(plan.write.relative_to(site)))
        if manifest:
            manifest = Path(manifest)
            txn.makedirs(manifest.parent)
            txn.stage(manifest, manifest_of(tree, series_dir, bytecode, stale_report).to_bytes())
        txn.commit()
        errors = []
        for rel in sorted(tree.contents):
            got = sha256_file(site / rel)
            want = tree.lock["files"][rel]["patched_sha256"]
            if got != want:
                errors.append(f"{site / rel}: sha256 after writing is {got}, expected {want}")
        if errors:
            raise OverlayError(errors)
        if smoke:
            smoke_import(site, tree.contents)
    result["action"] = "applied"
    result["bytecode"] = bytecode
    result["stale_bytecode"] = stale_report
    if manifest:
        result["manifest"] = str(manifest)
    return result
