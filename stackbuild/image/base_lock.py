"""`build.py lock`: the base tag resolved to a digest in its registry (offering every platform of the
recipe) and written to the recipe's lock (stackbuild/core/lock.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stackbuild.core.errors import LockError, PushError
from stackbuild.core.lock import LOCK_DEADLINE_SECONDS, write_lock
from stackbuild.core.recipe import Recipe
from stackbuild.core.reference import ImageReference
from stackbuild.image.connect import connect
from stackbuild.image.engine_api import ContainerEngine
from stackbuild.image.progress import Progress
from stackbuild.image.registry import registry_client


@dataclass(frozen=True)
class BaseLock:
    """The lock file written, the digest it pins and the platforms the registry offers under it."""

    path: Path
    digest: str
    platforms: tuple[str, ...]


def _config_platform(engine: ContainerEngine, reference: ImageReference, digest: str, progress: Progress) -> tuple:
    """The platform of the single image manifest ``digest``, read from its config in the registry (the engine
    names none for an OCI image manifest); () when the registry holds no such config."""
    reader = registry_client(engine, reference.repository, progress)
    try:
        found = reader.manifest(digest)
        config_digest = ((found.document if found else {}).get("config") or {}).get("digest", "")
        config = reader.image_config(config_digest) if config_digest else None
    except PushError as exc:
        raise LockError(str(exc)) from None
    if config is None or not config.os or not config.architecture:
        return ()
    return (f"{config.os}/{config.architecture}",)


def _offers(offered: tuple[str, ...], platform: str) -> bool:
    """Whether ``offered`` holds ``platform``, a variant (linux/arm64/v8) standing for its plain name."""
    return platform in offered or platform in {"/".join(o.split("/")[:2]) for o in offered}


def lock_base(recipe: Recipe, *, json_progress: bool = False) -> BaseLock:
    engine = connect()
    progress = Progress(json_lines=json_progress)
    reference = recipe.base.reference
    digest, offered = engine.registry_digest(reference, deadline=LOCK_DEADLINE_SECONDS, on_retry=progress.retry_event)
    if not offered:
        offered = _config_platform(engine, reference, digest, progress)
    for platform in recipe.platforms:
        if not _offers(offered, platform):
            raise LockError(f"{reference}: the registry offers {', '.join(offered) or 'no platform'}, not {platform}")
    return BaseLock(write_lock(recipe, digest, offered), digest, offered)
