"""The files a build context is made from: the one list the render copies and the pinned tag hashes.

The build context holds three payload trees (copied from the repository at
the same relative paths, under the payload root), the rendered Dockerfile and
files the host code generates from the recipe (the gate input, the record of
what the gate checked, the labels). So an image is made of the payload files
(:func:`payload_files`), the Dockerfile template, the host code that renders
and generates (``stackbuild/``) and the recipe's own files
(:func:`context_sources`). A file present on disk counts whether or not git
tracks it: it reaches the image either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from geometry import contract
from stackbuild.core.output import GENERATED_SUFFIXES
from stackbuild.core.recipe import REPO_ROOT, Recipe

# Build-context directories holding what the patch step and the gate step need.
PATCH_PAYLOAD = "patch-payload"
GATE_PAYLOAD = "gate-payload"
# The start-time pre-flight and the record of what the gate checked: after the gate step,
# so editing the pre-flight does not re-run the gate.
PREFLIGHT_PAYLOAD = "preflight-payload"
# Repository paths of what the context is rendered and generated from.
TEMPLATE = "Dockerfile.j2"
HOST_CODE = "stackbuild"
NORMALISE_SCRIPT = "stackbuild/image/normalise-mtimes.sh"  # run by every RUN step (patch payload)
# Never copied into a payload: caches, the trees' own tests, notes, maintainers' tools.
PAYLOAD_SKIP = ("__pycache__", "tests", ".pytest_cache")
PAYLOAD_SKIP_FILES = ("refresh.py", "pristine.py", "port.py")
PAYLOAD_SKIP_SUFFIXES = (".pyc", ".pyo", ".md", ".mk")
# Never a source of the context (host code, recipe): what Python and pytest leave behind.
CACHE_PARTS = ("__pycache__", ".pytest_cache")
CACHE_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class PayloadTree:
    """A repository directory copied into ``payload`` at the same relative path, without ``leave_out``."""

    payload: str
    source: str
    leave_out: str = ""  # a subdirectory that another payload holds


PAYLOAD_TREES = (
    PayloadTree(PATCH_PAYLOAD, "overlay"),
    PayloadTree(GATE_PAYLOAD, "geometry", leave_out=contract.PREFLIGHT_PACKAGE),
    PayloadTree(PREFLIGHT_PAYLOAD, contract.PREFLIGHT_PACKAGE),
)


@dataclass(frozen=True)
class PayloadFile:
    """One repository file copied into the build context."""

    source: Path  # the file on this machine
    name: str  # its path in the repository
    payload: str  # the build-context directory it goes into
    destination: str  # its path under that payload's payload root


def _payload_wanted(relative: Path) -> bool:
    return (
        not any(part in PAYLOAD_SKIP for part in relative.parts)
        and relative.name not in PAYLOAD_SKIP_FILES
        and not relative.name.endswith(PAYLOAD_SKIP_SUFFIXES)
    )


def _not_cache(relative: Path) -> bool:
    return not any(part in CACHE_PARTS for part in relative.parts) and not relative.name.endswith(CACHE_SUFFIXES)


def _files(root: Path) -> list[Path]:
    return [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())


def payload_files(repo: Path = REPO_ROOT) -> tuple[PayloadFile, ...]:
    """Every file the render copies from ``repo`` into the build context, in copy order."""
    out = []
    for tree in PAYLOAD_TREES:
        for path in _files(repo / tree.source):
            relative = path.relative_to(repo)
            if tree.leave_out and relative.is_relative_to(tree.leave_out):
                continue
            if _payload_wanted(relative):
                out.append(PayloadFile(path, relative.as_posix(), tree.payload, relative.as_posix()))
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
