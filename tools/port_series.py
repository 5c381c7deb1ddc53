"""Port a patch series to another pristine vLLM tree, hunk by hunk (maintainer tool).

    python -m tools.port_series --series SRC --pristine TREE --to DEST
                                [--distribution NAME==VERSION] [--replace] [--json]

SRC is a series directory (``series``, the patches); TREE holds the new vLLM's package
directory and dist-info as unpacked from its wheel (``make pristine SERIES=<name>``);
DEST is the new series directory, named ``<package>-<version>`` (``overlay/series/vllm-VERSION``).
The distribution is ``--distribution``, else DEST's ``distribution`` file if it has one, else
``<package>==<version>``; TREE's dist-info must be that distribution at that version.

Each hunk is looked for in the file as the series' earlier patches leave it in TREE, and
reported on one line (patch, file, hunk header, outcome):

- ``applied clean``: every context and removed line matches at the stated line;
- ``applied at offset N``: they all match, N lines from the stated line (nearest match;
  never before the previous hunk of the same file);
- ``needs fuzz F``: they match only with F (1 or 2) context lines dropped at each end;
- ``failed``: no such match (or the file is not in TREE).

When every hunk is clean or at an offset, DEST is written whole: ``series``, the patches
with each hunk header renumbered to where it applies (their text otherwise unchanged, the
free-form header included), ``distribution`` and ``lock.json`` (``refresh_lock.compute_lock``:
the strict applier's own code, so DEST applies to TREE exactly). It is staged next to
DEST and moved into place; an existing DEST is replaced only with ``--replace``. Otherwise
nothing is written. A hunk that needs fuzz or fails is fixed in SRC (or a copy of it) by
hand: edit the hunk to TREE's code, then run the port again.

Exit status: 0 DEST written; 1 a hunk needs fuzz or failed (report printed, nothing
written); 2 usage; 3 bad input (SRC, TREE or DEST unreadable, wrong version, DEST exists
without ``--replace``), one line naming the file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from overlay.diff import Hunk, apply_file_patch, parse_patch
from overlay.errors import OverlayError
from overlay.locate import installed_version, locate_vllm
from overlay.lock import LOCK_FILE, SERIES_FILE, read_series
from tools.pristine import DISTRIBUTION_FILE, read_base
from tools.refresh_lock import compute_lock

CLEAN = "clean"
OFFSET = "offset"
FUZZ = "fuzz"
FAILED = "failed"
MAX_FUZZ = 2
EXIT_WRITTEN, EXIT_HUNKS, EXIT_USAGE, EXIT_BAD_INPUT = 0, 1, 2, 3


@dataclass(frozen=True)
class HunkReport:
    """Where one hunk of the series applies in the new tree."""

    patch: str
    file: str
    header: str  # the hunk's header in the source series, e.g. "@@ -486,6 +493,131 @@"
    outcome: str  # CLEAN, OFFSET, FUZZ or FAILED
    offset: Optional[int] = None  # lines from the stated line (OFFSET, FUZZ)
    fuzz: int = 0  # context lines dropped at each end (FUZZ)
    line: Optional[int] = None  # the line of the new file it applies at (not FAILED)
    reason: str = ""  # FAILED: why

    @property
    def applies(self) -> bool:
        return self.outcome in (CLEAN, OFFSET)

    def line_text(self) -> str:
        where = f"{self.patch}: {self.file}: {self.header}"
        if self.outcome == CLEAN:
            return f"{where}: applied clean"
        if self.outcome == OFFSET:
            return f"{where}: applied at offset {self.offset:+d} (line {self.line})"
        if self.outcome == FUZZ:
            return f"{where}: needs fuzz {self.fuzz} (offset {self.offset:+d}, line {self.line})"
        return f"{where}: failed ({self.reason})"


def _header(hunk: Hunk) -> str:
    return f"@@ -{hunk.old_start},{hunk.old_len} +{hunk.new_start},{hunk.new_len} @@"


def _old_lines(hunk: Hunk) -> list:
    return [text for tag, text in hunk.lines if tag in (" ", "-")]


def _matches_at(src: list, lines: list, start: int) -> bool:
    return 0 <= start and start + len(lines) <= len(src) and src[start : start + len(lines)] == lines


def _nearest(src: list, lines: list, expected: int, floor: int) -> Optional[int]:
    """The start nearest ``expected`` (not below ``floor``) where ``lines`` match; ties go down."""
    for distance in range(0, len(src) + 1):
        for start in (expected - distance, expected + distance) if distance else (expected,):
            if start >= floor and _matches_at(src, lines, start):
                return start
    return None


def _fuzzed(hunk: Hunk, fuzz: int) -> tuple:
    """(old lines with up to ``fuzz`` leading/trailing context lines dropped, lines dropped at the top)."""
    lines = list(hunk.lines)
    top = 0
    while top < fuzz and lines and lines[0][0] == " ":
        lines.pop(0)
        top += 1
    bottom = 0
    while bottom < fuzz and lines and lines[-1][0] == " ":
        lines.pop()
        bottom += 1
    return [text for tag, text in lines if tag in (" ", "-")], top


def locate_hunks(original: bytes, fp, patch_name: str) -> tuple:
    """([HunkReport] for the file patch's hunks in ``original``, the hunks renumbered or None)."""
    src = original.splitlines(keepends=True)
    reports, moved = [], []
    floor = 0
    delta = 0
    for hunk in fp.hunks:
        header = _header(hunk)
        old = _old_lines(hunk)
        stated = hunk.old_start - 1 if hunk.old_len else hunk.old_start
        if not old:
            reports.append(HunkReport(patch_name, fp.path, header, FAILED, reason="no context lines to locate it by"))
            continue
        found = _nearest(src, old, stated, floor)
        if found is not None:
            offset = found - stated
            outcome = CLEAN if offset == 0 else OFFSET
            reports.append(HunkReport(patch_name, fp.path, header, outcome, offset or None, 0, found + 1))
            moved.append(Hunk(found + 1, hunk.old_len, found + 1 + delta, hunk.new_len, hunk.lines))
            delta += hunk.new_len - hunk.old_len
            floor = found + len(old)
            continue
        report = HunkReport(patch_name, fp.path, header, FAILED, reason="its context and removed lines match nowhere")
        for fuzz in range(1, MAX_FUZZ + 1):
            lines, top = _fuzzed(hunk, fuzz)
            at = _nearest(src, lines, stated + top, floor) if lines else None
            if at is not None:
                start = at - top
                report = HunkReport(patch_name, fp.path, header, FUZZ, start - stated, fuzz, start + 1)
                break
        reports.append(report)
    if all(r.applies for r in reports):
        return reports, tuple(moved)
    return reports, None


def _renumber(data: bytes, hunks: list) -> bytes:
    """The patch text with its hunk headers (after the first file header) replaced in order."""
    out = []
    it = iter(hunks)
    in_diff = False
    lines = data.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            in_diff = True
        if in_diff and line.startswith(b"@@ "):
            hunk = next(it)
            trailer = line.split(b"@@", 2)[2]
            line = f"@@ -{hunk.old_start},{hunk.old_len} +{hunk.new_start},{hunk.new_len} @@".encode() + trailer
        out.append(line)
    if next(it, None) is not None:
        raise OverlayError("internal: hunk headers and parsed hunks differ in number")
    return b"".join(out)


def port_series(src: Path, tree: Path) -> tuple:
    """([HunkReport] in series order, {patch name: renumbered bytes} or None if any hunk does not apply)."""
    names = read_series(src)
    contents = {}
    reports = []
    texts = {}
    ok = True
    for name in names:
        path = src / name
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise OverlayError(f"{path}: {exc.strerror}") from None
        file_patches = parse_patch(data, name)
        moved_all = []
        for fp in file_patches:
            if fp.path not in contents:
                target = tree / fp.path
                if not target.is_file():
                    for hunk in fp.hunks:
                        reports.append(HunkReport(name, fp.path, _header(hunk), FAILED, reason=f"{target} missing"))
                    ok = False
                    continue
                contents[fp.path] = target.read_bytes()
            file_reports, moved = locate_hunks(contents[fp.path], fp, name)
            reports.extend(file_reports)
            if moved is None:
                ok = False
                continue
            moved_fp = type(fp)(fp.path, moved)
            contents[fp.path] = apply_file_patch(contents[fp.path], moved_fp, name)
            moved_all.extend(moved)
        if ok:
            texts[name] = _renumber(data, moved_all)
    return reports, (texts if ok else None)


def write_series(src: Path, dest: Path, tree: Path, distribution: str, texts: dict, replace: bool) -> dict:
    """Stage DEST next to itself, lock it against ``tree``, move it into place; returns the lock."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage_root = Path(tempfile.mkdtemp(prefix=f".{dest.name}.port-", dir=dest.parent))
    try:
        stage = stage_root / dest.name
        stage.mkdir()
        shutil.copyfile(src / SERIES_FILE, stage / SERIES_FILE)
        for name, data in texts.items():
            (stage / name).write_bytes(data)
        (stage / DISTRIBUTION_FILE).write_text(
            f"# The PyPI wheel this series is made against (tools/pristine.py): NAME==VERSION.\n{distribution}\n",
            encoding="utf-8",
        )
        lock = compute_lock(stage, tree)
        (stage / LOCK_FILE).write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        old = stage_root / "previous"
        if dest.exists():
            if not replace:
                raise OverlayError(f"{dest}: exists; pass --replace to replace it")
            os.replace(dest, old)
        os.replace(stage, dest)
        return lock
    finally:
        shutil.rmtree(stage_root, ignore_errors=True)


def _distribution(dest: Path, given: Optional[str]) -> str:
    if given:
        return given
    if (dest / DISTRIBUTION_FILE).is_file():
        return read_base(dest).requirement
    package, _, version = dest.name.partition("-")
    return f"{package}=={version}"


def _check_tree(dest: Path, tree: Path, distribution: str) -> None:
    name, _, version = distribution.partition("==")
    package, _, dest_version = dest.name.partition("-")
    if not version or not package or dest_version != version:
        raise OverlayError(f"{dest}: a series directory is named <package>-<version> of {distribution}")
    pkg = locate_vllm(package, vllm_dir=tree / package)
    got, meta = installed_version(pkg, name)
    if got != version:
        raise OverlayError(f"{meta}: the tree is {name} {got}, the port is to {version}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Port a patch series to a new pristine tree, hunk by hunk.")
    parser.add_argument("--series", required=True, help="the series to port (a directory)")
    parser.add_argument("--pristine", required=True, help="the new tree: package dir and dist-info")
    parser.add_argument("--to", required=True, help="the new series directory, <package>-<version>")
    parser.add_argument("--distribution", help="NAME==VERSION of the new tree's wheel")
    parser.add_argument("--replace", action="store_true", help="replace an existing --to directory")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_WRITTEN
    src, tree, dest = Path(args.series).resolve(), Path(args.pristine).resolve(), Path(args.to).resolve()
    try:
        distribution = _distribution(dest, args.distribution)
        _check_tree(dest, tree, distribution)
        if dest.exists() and not args.replace:
            raise OverlayError(f"{dest}: exists; pass --replace to replace it")
        reports, texts = port_series(src, tree)
    except OverlayError as exc:
        for line in exc.errors:
            print(f"port: error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    lock = None
    if texts is not None:
        try:
            lock = write_series(src, dest, tree, distribution, texts, args.replace)
        except (OverlayError, OSError) as exc:
            for line in getattr(exc, "errors", [str(exc)]):
                print(f"port: error: {line}", file=sys.stderr)
            return EXIT_BAD_INPUT
    failing = [r for r in reports if not r.applies]
    if args.json:
        print(
            json.dumps(
                {
                    "ok": texts is not None,
                    "written": str(dest) if texts is not None else None,
                    "hunks": [dict(asdict(r), applies=r.applies) for r in reports],
                    "files": sorted(lock["files"]) if lock else [],
                },
                indent=2,
            )
        )
    else:
        for report in reports:
            print(report.line_text())
        if texts is None:
            print(f"port: {len(failing)} of {len(reports)} hunks do not apply exactly; nothing written")
        else:
            print(f"port: wrote {dest} ({len(texts)} patches, {len(lock['files'])} files, lock.json)")
    return EXIT_WRITTEN if texts is not None else EXIT_HUNKS


if __name__ == "__main__":
    sys.exit(main())
