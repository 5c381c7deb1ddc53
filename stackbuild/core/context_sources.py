"""The files a build context is made from: the one list the render copies and the pinned tag hashes.

The build context holds three payload trees (under the payload root, each file at its
repository path), the rendered Dockerfile and files the host code generates from the recipe
(the gate input, the record of what the gate checked, the labels). What a payload holds is a
list (:data:`PAYLOADS`): the modules the image runs (its entry points) and every module under
the repository they import (``geometry.import_closure``, read from the source), plus the data
they read. A module nothing in the image imports (the tests' helpers, the maintainers' tools,
the host's own use of geometry) is never copied. So an image is made of the payload files
(:func:`payload_files`), the Dockerfile template, the host code that renders and generates
(``stackbuild/``) and the recipe's own files (:func:`context_sources`). A file present on disk
counts whether or not git tracks it: it reaches the image either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geometry import contract, import_closure
from stackbuild.core.output import GENERATED_SUFFIXES
from stackbuild.core.recipe import REPO_ROOT, Recipe

# Build-context directories holding what the patch step, the gate step and the start-time
# pre-flight (with the record of what the gate checked) need; the Dockerfile copies all three
# in one step, in this order.
PATCH_PAYLOAD = "patch-payload"
GATE_PAYLOAD = "gate-payload"
PREFLIGHT_PAYLOAD = "preflight-payload"
# Repository paths of what the context is rendered and generated from.
TEMPLATE = "Dockerfile.j2"
HOST_CODE = "stackbuild"
NORMALISE_SCRIPT = "stackbuild/image/normalise-mtimes.sh"  # run by every RUN step (patch payload)
# Never a source of the context: what Python and pytest leave behind.
CACHE_PARTS = ("__pycache__", ".pytest_cache")
CACHE_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class Payload:
    """One build-context directory: the modules its entry points import (those an earlier
    payload ships left out) and the data they read."""

    directory: str  # the build-context directory
    entry_points: tuple[str, ...]  # repository paths of the modules the image runs
    data: tuple[str, ...] = ()  # repository paths of the files and directories they read


# In the order of the Dockerfile's COPY sources (a file two payloads import ships in the first).
PAYLOADS = (
    # overlay/apply.py, run as a script, and the patch series (each with its lock).
    Payload(PATCH_PAYLOAD, (contract.OVERLAY_APPLY,), data=(contract.OVERLAY_SERIES,)),
    # python3 -m geometry.gate_main, and the same gate under the published script name.
    Payload(GATE_PAYLOAD, (contract.GATE_MODULE_PATH, contract.GATE_SCRIPT)),
    # The image's ENTRYPOINT.
    Payload(PREFLIGHT_PAYLOAD, (contract.PREFLIGHT_ENTRYPOINT,)),
)


@dataclass(frozen=True)
class PayloadFile:
    """One repository file copied into the build context."""

    source: Path  # the file on this machine
    name: str  # its path in the repository
    payload: str  # the build-context directory it goes into
    destination: str  # its path under that payload's payload root


def _not_cache(relative: Path) -> bool:
    return not any(part in CACHE_PARTS for part in relative.parts) and not relative.name.endswith(CACHE_SUFFIXES)


def _files(root: Path) -> list[Path]:
    return [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())


def _payload_names(payload: Payload, repo: Path) -> list[str]:
    names = list(import_closure(repo, payload.entry_points))
    for data in payload.data:
        names += [p.relative_to(repo).as_posix() for p in _files(repo / data) if _not_cache(p.relative_to(repo))]
    return sorted(names)


def payload_files(repo: Path = REPO_ROOT) -> tuple[PayloadFile, ...]:
    """Every file the render copies from ``repo`` into the build context, in copy order."""
    out: list[PayloadFile] = []
    shipped: set[str] = set()
    for payload in PAYLOADS:
        for name in _payload_names(payload, repo):
            if name not in shipped:
                shipped.add(name)
                out.append(PayloadFile(repo / name, name, payload.directory, name))
    out.append(PayloadFile(repo / NORMALISE_SCRIPT, NORMALISE_SCRIPT, PATCH_PAYLOAD, contract.NORMALISE_MTIMES))
    return tuple(out)


def context_sources(recipe: Recipe, repo: Path = REPO_ROOT) -> dict[str, Path]:
    """Every file the build context of ``recipe`` is copied, rendered or generated from.

    Keyed by a name independent of where the file lies on this machine: its
    repository path, ``recipe/...`` for the recipe's directory (recipe.yaml, its
    lock, its oracle record, its configs), ``target.config`` and
    ``drafter.config`` for the model configs wherever the recipe points.
    """
    files = {f.name: f.source for f in payload_files(repo)}
    files[TEMPLATE] = repo / TEMPLATE
    for path in _files(repo / HOST_CODE):
        relative = path.relative_to(repo)
        if _not_cache(relative):
            files[relative.as_posix()] = path
    for path in _files(recipe.directory):
        relative = path.relative_to(recipe.directory)
        if _not_cache(relative) and not relative.name.endswith(GENERATED_SUFFIXES):
            files[f"recipe/{relative.as_posix()}"] = path
    files["target.config"] = (recipe.directory / recipe.target.config).resolve()
    if recipe.drafter is not None:
        files["drafter.config"] = (recipe.directory / recipe.drafter.config).resolve()
    return files
