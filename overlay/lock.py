"""A patch series and its lock.

A series directory holds ``series`` (the patch names in application order),
the patches, ``distribution`` (the wheel it is made against: ``tools.pristine``) and
``lock.json`` (written by ``tools/refresh_lock.py``: the package directory, the distribution and version
the series targets, where the pristine files came from, the pristine and patched sha256 of every file it touches,
and each patch's sha256).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .diff import parse_patch
from .errors import OverlayError

SERIES_ROOT = Path(__file__).resolve().parent / "series"
# The oracle's vLLM in a checkout (one line ``vllm==VERSION``); its series is the tools' default.
VLLM_REQUIREMENTS = SERIES_ROOT.parent.parent / "requirements" / "vllm.txt"
SERIES_FILE = "series"
LOCK_FILE = "lock.json"


def default_series() -> Path:
    """``series/vllm-VERSION`` for the ``vllm==VERSION`` line of requirements/vllm.txt (a checkout's;
    the image names its series with ``--series``)."""
    try:
        text = VLLM_REQUIREMENTS.read_text(encoding="utf-8")
    except OSError as exc:
        raise OverlayError(f"{VLLM_REQUIREMENTS}: {exc.strerror} (no default series: pass --series)") from None
    pins = [line.strip()[len("vllm==") :] for line in text.splitlines() if line.strip().startswith("vllm==")]
    if len(pins) != 1 or not pins[0]:
        raise OverlayError(f"{VLLM_REQUIREMENTS}: expected one line vllm==VERSION, found {pins!r}")
    return SERIES_ROOT / f"vllm-{pins[0]}"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    return sha256_bytes(Path(path).read_bytes())


def read_series(series_dir) -> list:
    """Patch names in application order (``#`` comments and blanks skipped)."""
    path = Path(series_dir) / SERIES_FILE
    names = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            if "/" in line or line.startswith("."):
                raise OverlayError(f"{path}: invalid patch name {line!r}")
            names.append(line)
    if not names:
        raise OverlayError(f"{path}: the series lists no patches")
    return names


def series_sha256(series_dir) -> str:
    """One digest for the whole series: series file, lock and every patch.

    Stable across checkouts (content only, in series order); the build
    driver records it in an image label.
    """
    series_dir = Path(series_dir)
    digest = hashlib.sha256()
    members = [SERIES_FILE, LOCK_FILE] + read_series(series_dir)
    for name in members:
        digest.update(name.encode("utf-8") + b"\0")
        digest.update(sha256_file(series_dir / name).encode("ascii") + b"\n")
    return digest.hexdigest()


def read_lock(series_dir) -> dict:
    path = Path(series_dir) / LOCK_FILE
    try:
        lock = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OverlayError(f"{path}: missing; run python -m tools.refresh_lock") from None
    except ValueError as exc:
        raise OverlayError(f"{path}: not valid JSON ({exc})") from None
    for key in ("package", "distribution", "version", "source", "files", "patches"):
        if key not in lock:
            raise OverlayError(f"{path}: no {key!r} entry")
    return lock


def load_patches(series_dir, lock) -> list:
    """[(name, [FilePatch])] in series order, each patch's sha256 checked."""
    series_dir = Path(series_dir)
    result = []
    errors = []
    for name in read_series(series_dir):
        path = series_dir / name
        if not path.is_file():
            errors.append(f"{path}: listed in the series but missing")
            continue
        data = path.read_bytes()
        want = lock["patches"].get(name)
        if want is None:
            errors.append(f"{path}: not recorded in {LOCK_FILE}; run python -m tools.refresh_lock")
            continue
        if sha256_bytes(data) != want:
            errors.append(
                f"{path}: sha256 {sha256_bytes(data)} differs from {LOCK_FILE} ({want}); "
                "run python -m tools.refresh_lock"
            )
            continue
        result.append((name, parse_patch(data, name)))
    extra = set(lock["patches"]) - set(read_series(series_dir))
    if extra:
        errors.append(f"{LOCK_FILE}: records patches not in the series: {sorted(extra)}")
    if errors:
        raise OverlayError(errors)
    return result
