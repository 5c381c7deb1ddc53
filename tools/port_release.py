"""Follow a vLLM release: fetch it, port the newest series onto it, hold the gate to its planning (make port).

    python -m tools.port_release --to VERSION|latest|nightly [--from SERIES] [--matrix recipes|full]
                                 [--recipe PATH ...] [--out DIR] [--write [--replace]] [--json]

1. The release's wheel from PyPI into ``.cache/wheels`` (``pip download --no-deps``; a wheel already
   there is used) and its pristine tree in ``.cache/vllm-VERSION`` (tools/port_fetch.py).
2. The series (``--from``: a directory, or a name under overlay/series; default the newest ``vllm``
   series) ported onto that tree hunk by hunk (tools/port_series.py). When every hunk applies, the
   ported series is staged in ``DIR/series/vllm-VERSION`` (``--write``: also overlay/series/vllm-VERSION).
3. When it applies and the gate models the release (geometry/vllm_versions.py), the scenario matrix
   (tools/port_matrix.py) planned by the simulator and by the release's own code: stock on a copy of the
   pristine tree, overlay on a copy with the staged series applied by overlay/apply.py (the strict applier)
   (tools/port_agreement.py).

One report (tools/port_report.py), text or ``--json``; progress lines go to stderr. The exit code is
the outcome: ``PortExit`` (0 applies clean, 1 needs hand work, 2 usage, 3 bad input, 4 not modelled,
5 gate disagrees, 6 oracle cannot plan). DIR (default ``out/port/vllm-VERSION``) also keeps
``report.json`` and the planning processes' logs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from geometry.errors import BadInput
from geometry.vllm_versions import release as modelled_release
from overlay.errors import OverlayError
from overlay.lock import read_series
from stackbuild.core.errors import RecipeError
from tools.port_agreement import agreement
from tools.port_fetch import DISTRIBUTION, LATEST, NIGHTLY, fetch_wheel, pristine_tree
from tools.port_matrix import MATRICES, scenarios
from tools.port_report import PortExit, PortReport
from tools.port_series import port_series, write_series
from tools.pristine import cache_dir, copy_tree, read_base

REPO = Path(__file__).resolve().parent.parent
SERIES_ROOT = REPO / "overlay" / "series"
APPLY = REPO / "overlay" / "apply.py"


def progress(line: str) -> None:
    print(f"port: {line}", file=sys.stderr, flush=True)


def _release_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def newest_series() -> Path:
    """The series of the newest vLLM (PyPI ``vllm``) release under overlay/series."""
    found = []
    for path in SERIES_ROOT.iterdir():
        if (path / "distribution").is_file():
            base = read_base(path)
            if base.distribution == DISTRIBUTION:
                found.append((_release_key(base.version), path))
    if not found:
        raise OverlayError(f"{SERIES_ROOT}: no series of {DISTRIBUTION}")
    return max(found)[1]


def _series(given) -> Path:
    if not given:
        return newest_series()
    path = Path(given)
    if not path.is_dir() and (SERIES_ROOT / given).is_dir():
        path = SERIES_ROOT / given
    if not (path / "series").is_file():
        raise OverlayError(f"{given}: no such series (a series directory, or a name under {SERIES_ROOT})")
    read_series(path)  # a readable series file, else OverlayError naming it
    return path.resolve()


def _not_modelled(version: str):
    """Why the gate cannot hold this release's GPU planning to anything, or None."""
    try:
        entry = modelled_release(version)
    except BadInput as exc:
        return str(exc)
    if not entry.gpu_modelled:
        return f"vLLM {version} is modelled by the geometry gate on the CPU platform only; the recipes are GPU"
    return None


def _patched_tree(pristine: Path, series: Path, out: Path) -> Path:
    site = out / "overlay-tree"
    shutil.rmtree(site, ignore_errors=True)
    copy_tree(pristine, site)
    run = subprocess.run(
        [sys.executable, str(APPLY), "--series", str(series), "--site-packages", str(site)],
        capture_output=True,
        text=True,
    )
    if run.returncode:
        raise OverlayError(f"overlay/apply.py refuses the ported series on {site}: {run.stderr.strip()}")
    return site


def run(args) -> PortReport:
    wheel = fetch_wheel(args.to, cache_dir() / "wheels", progress)
    rel = pristine_tree(wheel, progress)
    src = _series(args.source)
    progress(f"porting {src.name} onto {rel.tree}")
    hunks, texts = port_series(src, rel.tree)
    name = f"{DISTRIBUTION}-{rel.version}"
    out = Path(args.out or REPO / "out" / "port" / name).resolve()
    report = PortReport(rel.version, wheel.name, src.name, tuple(hunks))
    if texts is None:
        return report
    requirement = f"{DISTRIBUTION}=={rel.version}"
    staged = out / "series" / name
    write_series(src, staged, rel.tree, requirement, texts, replace=True)
    written = None
    if args.write:
        written = SERIES_ROOT / name
        write_series(src, written, rel.tree, requirement, texts, replace=args.replace)
    report = PortReport(rel.version, wheel.name, src.name, tuple(hunks), str(staged), written and str(written))
    why = _not_modelled(rel.version)
    if why:
        return PortReport(**{**report.__dict__, "not_modelled": why})
    matrix = scenarios(rel.version, args.matrix, args.recipe)
    progress(f"copying the trees and applying the ported series (overlay/apply.py) under {out}")
    stock = out / "stock-tree"
    shutil.rmtree(stock, ignore_errors=True)
    trees = {"stock": copy_tree(rel.tree, stock), "overlay": _patched_tree(rel.tree, staged, out)}
    progress(f"planning {len(matrix)} scenarios with the simulator and vLLM {rel.version} (two processes)")
    results = agreement(trees, matrix, out, progress)
    return PortReport(**{**report.__dict__, "scenarios": tuple(results)})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.port_release",
        description="Port the newest overlay series onto a vLLM release and hold the gate to its planning.",
    )
    parser.add_argument("--to", required=True, help=f"a vLLM version, {LATEST!r} (PyPI) or {NIGHTLY!r}")
    parser.add_argument("--from", dest="source", help="the series to port (default: the newest vllm series)")
    parser.add_argument("--matrix", choices=MATRICES, default="full", help="the scenarios (default: full)")
    parser.add_argument(
        "--recipe",
        action="append",
        type=Path,
        help="plan only this recipe's scenarios (repeatable; default: every recipe)",
    )
    parser.add_argument("--out", help="the staging directory (default: out/port/vllm-VERSION)")
    parser.add_argument("--write", action="store_true", help="also write overlay/series/vllm-VERSION")
    parser.add_argument("--replace", action="store_true", help="with --write: replace an existing series")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return PortExit.USAGE if exc.code else PortExit.APPLIES_CLEAN
    if args.replace and not args.write:
        print("port: error: --replace needs --write", file=sys.stderr)
        return PortExit.USAGE
    try:
        report = run(args)
    except (OverlayError, RecipeError, OSError) as exc:
        for line in getattr(exc, "errors", None) or [str(exc)]:
            print(f"port: error: {' '.join(str(line).split())}", file=sys.stderr)
        return PortExit.BAD_INPUT
    data = report.to_json()
    if report.staged:
        (Path(report.staged).parent.parent / "report.json").write_text(json.dumps(data, indent=2) + "\n")
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print("\n".join(report.lines()))
    return report.outcome


if __name__ == "__main__":
    sys.exit(main())
