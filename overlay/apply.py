#!/usr/bin/env python3
"""Apply the overlay's patch series to an installed vLLM: all patches or none.

Standard library only; runs with any Python >= 3.9 (the base image's Python
inside the image build, or a host Python against a copied tree in tests).

What it does, in order:

1. Locates the vLLM package without importing it (``--vllm-dir`` / the
   ``--site-packages`` argument, else ``importlib.util.find_spec``), and reads
   the installed version from the distribution's ``METADATA`` (``locate``).
2. Refuses (one line per error, naming the file or version; exit 1) unless
   the version is the series' target and every file the series touches has
   the pristine sha256 recorded in ``lock.json`` (or, as a whole, the patched
   one: then the overlay is reported as already applied) (``tree``, ``lock``).
3. Applies every patch in memory, strictly: each hunk at its stated line,
   every context and removed line verified, no offset, no fuzz. Checks each
   result against the patched sha256 in the lock (``diff``).
4. Compiles every new source in memory (a patch that leaves a syntax error is
   refused), writes everything to temporary files next to their targets, then
   moves them into place with ``os.replace``, re-reads and re-hashes the
   result. Any failure restores every touched path to its previous bytes
   (``patch_tree``, ``transaction``). No bytecode is written for the changed
   modules unless ``--write-bytecode`` asks for it; what happens to the base's
   cached bytecode of them is ``bytecode``'s policy.
5. Optionally imports every patched module in a subprocess
   (``--smoke-import``; a failure rolls the tree back) and writes the manifest
   (``--manifest``; ``manifest.OverlayManifest``).

Exit status: 0 applied / already applied / check passed; 1 refused or
failed (the tree is unchanged); 2 usage error.

Run as a script (the image runs ``python3 <payload>/overlay/apply.py``), its
own directory is first on ``sys.path``: that entry is replaced by the parent
directory, so the package ``overlay`` it belongs to is imported from there and
its modules cannot shadow anything as top-level names. The applier writes no
bytecode of its own modules (an image layer holds the changed sources only).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    _here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.realpath(_here):
        sys.path[0] = os.path.dirname(_here)
    else:  # python -P / PYTHONSAFEPATH: the script's directory is not on the path
        sys.path.insert(0, os.path.dirname(_here))
    sys.dont_write_bytecode = True

import argparse  # noqa: E402
import json  # noqa: E402

from overlay.errors import OverlayError  # noqa: E402
from overlay.lock import default_series, series_sha256  # noqa: E402
from overlay.patch_tree import apply_series  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Apply the GLM-5.3 overlay patch series to vLLM (all or nothing).")
    parser.add_argument("--series", help="series directory (default: lock.default_series, a checkout's)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--site-packages", help="directory holding vllm/ and its dist-info")
    where.add_argument("--vllm-dir", help="the vllm package directory itself")
    parser.add_argument("--manifest", help="write the manifest JSON here")
    parser.add_argument("--check", action="store_true", help="verify only, write nothing")
    parser.add_argument(
        "--write-bytecode", action="store_true", help="also write hash-based .pyc for the changed modules"
    )
    parser.add_argument("--smoke-import", action="store_true", help="import every patched module in a subprocess")
    parser.add_argument("--json", action="store_true", help="print a JSON result")
    parser.add_argument("--print-series-sha256", action="store_true", help="print series_sha256 of --series and exit")
    args = parser.parse_args(argv)
    try:
        args.series = args.series or str(default_series())
    except OverlayError as exc:
        print(f"overlay: error: {exc}", file=sys.stderr)
        return 2

    if args.print_series_sha256:
        try:
            print(series_sha256(args.series))
        except (OverlayError, OSError) as exc:
            print(f"overlay: error: {exc}", file=sys.stderr)
            return 1
        return 0
    try:
        result = apply_series(
            args.series,
            vllm_dir=args.vllm_dir,
            site_packages=args.site_packages,
            manifest=args.manifest,
            check=args.check,
            smoke=args.smoke_import,
            write_bytecode=args.write_bytecode,
        )
    except OverlayError as exc:
        if args.json:
            print(json.dumps({"ok": False, "errors": exc.errors}, indent=2))
        for line in exc.errors:
            print(f"overlay: error: {line}", file=sys.stderr)
        return 1
    except OSError as exc:
        if args.json:
            print(json.dumps({"ok": False, "errors": [str(exc)]}, indent=2))
        print(f"overlay: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        state = result.get("state", result["action"])
        print(
            f"overlay: {result['action']}: vllm {result['version']} at "
            f"{result['package_dir']} ({state}; {len(result['files'])} files; "
            f"series {result['series_sha256'][:16]})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
