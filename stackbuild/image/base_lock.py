"""`build.py lock`: the base tag resolved to a digest in its registry (offering every platform of the
recipe) and written to the recipe's lock (stackbuild/core/lock.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stackbuild.core.lock import LOCK_DEADLINE_SECONDS, write_lock
from stackbuild.core.recipe import Recipe
from stackbuild.image.connect import connect
from stackbuild.image.progress import Progress


@dataclass(frozen=True)
class BaseLock:
    """The lock file written, the digest it pins and the platforms the registry offers under it."""

    path: Path
    digest: str
    platforms: tuple[str, ...]


def lock_base(recipe: Recipe, *, json_progress: bool = False) -> BaseLock:
    engine = connect()
    digest, platforms = engine.registry_digest(
        recipe.base.reference,
        recipe.platforms,
        deadline=LOCK_DEADLINE_SECONDS,
        on_retry=Progress(json_lines=json_progress).retry_event,
    )
    return BaseLock(write_lock(recipe, digest, platforms), digest, platforms)
