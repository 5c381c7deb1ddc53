"""A vLLM release's wheel and pristine tree, for tools.port_release (maintainer side).

The wheel comes from PyPI as ``pristine.mk`` fetches a series' wheel (``pip download --no-deps
--only-binary=:all:`` into ``<cache>/wheels``); a wheel already there is used as it is. ``latest`` is
the version PyPI's JSON API calls current; ``nightly`` is the newest wheel of vLLM's per-commit index
(``NIGHTLY_INDEX``, a PEP 503 index; pre-releases allowed). The tree is the wheel's package directory
and dist-info, unpacked by ``tools.pristine.unpack`` into ``<cache>/vllm-VERSION`` (the tree
``make pristine`` makes), unless that tree is already unpacked from the same wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from overlay.errors import OverlayError
from tools.pristine import UNPACKED_STAMP, SeriesBase, cache_dir, unpack, wheel_name

DISTRIBUTION = "vllm"
PYPI_JSON = f"https://pypi.org/pypi/{DISTRIBUTION}/json"
NIGHTLY_INDEX = "https://wheels.vllm.ai/nightly"
LATEST, NIGHTLY = "latest", "nightly"


class FetchFailed(OverlayError):
    """The release's wheel cannot be had or read."""


@dataclass(frozen=True)
class Release:
    version: str
    wheel: Path
    tree: Path  # holds vllm/ and the dist-info


def latest_version(timeout: float = 60) -> str:
    """The version PyPI's JSON API gives as the distribution's current release."""
    try:
        with urllib.request.urlopen(PYPI_JSON, timeout=timeout) as response:
            return json.load(response)["info"]["version"]
    except (OSError, ValueError, KeyError) as exc:
        raise FetchFailed(f"{PYPI_JSON}: {exc}") from None


def wheel_version(wheel: Path) -> str:
    """The ``Version`` of the wheel's own METADATA."""
    try:
        with zipfile.ZipFile(wheel) as whl:
            name = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            return Parser().parsestr(whl.read(name).decode("utf-8"), headersonly=True)["Version"]
    except (OSError, zipfile.BadZipFile, StopIteration, UnicodeDecodeError) as exc:
        raise FetchFailed(f"{wheel}: no readable dist-info METADATA ({exc or 'none'})") from None


def _cached(wheel_dir: Path, version: str) -> list:
    return sorted(wheel_dir.glob(f"{wheel_name(DISTRIBUTION)}-{version}-*.whl"))


def _pip_download(args: list, dest: Path, progress) -> None:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(dest), *args]
    progress(f"downloading: {' '.join(command[1:])}")
    run = subprocess.run(command, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
    if run.returncode:
        last = [line for line in run.stderr.splitlines() if line.strip()][-1:] or [f"exit {run.returncode}"]
        raise FetchFailed(f"pip download {' '.join(args)}: {last[0].strip()}")


def fetch_wheel(to: str, wheel_dir: Path, progress) -> Path:
    """The wheel of release ``to`` (a version, ``latest`` or ``nightly``) in ``wheel_dir``."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    if to == LATEST:
        to = latest_version()
        progress(f"latest release on PyPI: {DISTRIBUTION} {to}")
    if to != NIGHTLY:
        found = _cached(wheel_dir, to)
        if not found:
            _pip_download([f"{DISTRIBUTION}=={to}"], wheel_dir, progress)
            found = _cached(wheel_dir, to)
        if len(found) != 1:
            raise FetchFailed(f"{wheel_dir}: expected one {DISTRIBUTION} {to} wheel, found {[w.name for w in found]}")
        progress(f"wheel: {found[0]}")
        return found[0]
    stage = Path(tempfile.mkdtemp(prefix=".nightly-", dir=wheel_dir))
    try:
        _pip_download(["--pre", "--index-url", NIGHTLY_INDEX, DISTRIBUTION], stage, progress)
        wheels = sorted(stage.glob("*.whl"))
        if len(wheels) != 1:
            raise FetchFailed(f"{NIGHTLY_INDEX}: expected one wheel, got {[w.name for w in wheels]}")
        target = wheel_dir / wheels[0].name
        os.replace(wheels[0], target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    progress(f"nightly wheel: {target}")
    return target


def pristine_tree(wheel: Path, progress) -> Release:
    """The wheel's tree in ``<cache>/vllm-VERSION``: unpacked unless it already is, from this wheel."""
    version = wheel_version(wheel)
    base = SeriesBase(f"{DISTRIBUTION}-{version}", "vllm", DISTRIBUTION, version)
    dest = cache_dir() / base.series
    stamp = dest / UNPACKED_STAMP
    if stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == wheel.name:
        progress(f"pristine tree: {dest} (unpacked from {wheel.name})")
        return Release(version, wheel, dest)
    progress(f"unpacking {wheel.name} into {dest}")
    try:
        progress(unpack(base, wheel.parent, dest))
    except (OverlayError, OSError, zipfile.BadZipFile) as exc:
        raise FetchFailed(f"{wheel}: {getattr(exc, 'errors', [exc])[0]}") from None
    return Release(version, wheel, dest)
