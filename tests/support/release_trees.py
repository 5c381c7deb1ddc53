"""The modelled vLLM releases the venv does not hold, run from their pristine trees (``make pristine-all``:
each series' wheel, its package directory and dist-info under .cache/SERIES) put first on PYTHONPATH."""

from __future__ import annotations

import os
from pathlib import Path

from infra.fixtures import unavailable

from geometry.vllm_versions import RELEASES
from support.repo import REPO

CACHE = REPO / ".cache"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def newest_cpu_modelled_release() -> str:
    """The newest release of the version table whose CPU platform the gate models (no ``cpu_refusal``)."""
    return max((v for v, r in RELEASES.items() if r.cpu_refusal is None), key=_key)


def release_tree(version: str) -> Path:
    """The pristine tree of ``version`` ($OVERLAY_CACHE/vllm-VERSION, default .cache/), or unavailable
    (a failure under CI=true, else a skip)."""
    tree = Path(os.environ.get("OVERLAY_CACHE", CACHE)) / f"vllm-{version}"
    if not (tree / "vllm").is_dir():
        unavailable(f"no pristine vLLM {version} tree at {tree}: run `make pristine-all`")
    return tree.resolve()


def tree_env(tree: Path) -> dict:
    """The environment a script runs vLLM from ``tree`` in: that tree first on PYTHONPATH, then the repository
    and tests/; vLLM's CPU platform; no bytecode written into the tree."""
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tree), str(REPO), str(REPO / "tests")]),
        PYTHONDONTWRITEBYTECODE="1",
        VLLM_TARGET_DEVICE="cpu",
    )
