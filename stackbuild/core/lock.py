"""Pin the base image: the digest comes from the recipe or from its lock file.

``build.py lock`` asks the registry (through the Docker engine, so the
standard credentials apply) what the base tag points to, checks that it
offers each of the recipe's platforms, and writes ``recipe.lock.json`` next
to the recipe. Every build after that reads the lock; nothing ever invents a
digest. A multi-platform recipe pins one digest, the base's image index;
each platform's build takes its image from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from stackbuild.core.atomic import replace_text
from stackbuild.core.errors import LockError, RecipeError
from stackbuild.core.recipe import Recipe
from stackbuild.core.reference import DIGEST_RE, ImageReference

LOCK_NAME = "recipe.lock.json"
# `build.py lock` asks the registry through the engine; retries included, it answers or fails within this.
LOCK_DEADLINE_SECONDS = 3.0


@dataclass(frozen=True)
class PinnedBase:
    image: str
    tag: str
    digest: Optional[str]
    platform: str
    source: str  # "recipe", "lock" or "unpinned"

    @property
    def reference(self) -> ImageReference:
        """``image:tag@sha256:...`` (tag kept for readers; the digest decides)."""
        return ImageReference(self.image, self.tag, self.digest)


def lock_path(recipe: Recipe) -> Path:
    return recipe.directory / LOCK_NAME


def read_lock(recipe: Recipe) -> Optional[dict]:
    path = lock_path(recipe)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        base = data["base"]
        entry = {k: base[k] for k in ("image", "tag", "digest")}
        # Locks of single-platform recipes name their `platform`; of multi-platform ones, `platforms`.
        entry["platforms"] = tuple(base["platforms"]) if "platforms" in base else (base["platform"],)
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise RecipeError(path, "base", f"unreadable lock file ({exc}); delete it and run `build.py lock`") from None
    if not isinstance(entry["digest"], str) or not DIGEST_RE.match(entry["digest"]):
        raise RecipeError(
            path,
            "base.digest",
            f"not a digest: expected 'sha256:' followed by 64 lowercase hex digits, got {entry['digest']!r}",
        )
    return entry


def pinned_base(recipe: Recipe, *, allow_unpinned: bool = False) -> PinnedBase:
    """The base to build FROM; refuses an unpinned base unless allowed."""
    base = recipe.base
    lock = read_lock(recipe)
    if lock is not None:
        wanted = (base.image, base.tag, recipe.platforms)
        locked = (lock["image"], lock["tag"], lock["platforms"])
        if locked != wanted:
            raise LockError(
                f"{lock_path(recipe)}: base: the lock pins {ImageReference(lock['image'], lock['tag'])} "
                f"for {', '.join(lock['platforms'])}, "
                f"the recipe asks for {base.reference} for {', '.join(recipe.platforms)}; "
                f"run `build.py lock --recipe {recipe.path}`"
            )
        if base.digest is not None and base.digest != lock["digest"]:
            raise LockError(
                f"{recipe.path}: base.digest: {base.digest} differs from the lock's {lock['digest']} "
                f"({lock_path(recipe).name}); keep one of them"
            )
        return PinnedBase(base.image, base.tag, lock["digest"], recipe.platform, "lock")
    if base.digest is not None:
        return PinnedBase(base.image, base.tag, base.digest, recipe.platform, "recipe")
    if allow_unpinned:
        return PinnedBase(base.image, base.tag, None, recipe.platform, "unpinned")
    raise LockError(
        f"{recipe.path}: base.digest: {base.reference} is not pinned (no digest in the recipe, no {LOCK_NAME}); "
        f"run `build.py lock --recipe {recipe.path}` or pass --allow-unpinned"
    )


def write_lock(recipe: Recipe, digest: str, platforms: tuple[str, ...]) -> Path:
    if not DIGEST_RE.match(digest):
        raise LockError(f"{recipe.base.reference}: the registry answered {digest!r}, which is not a sha256 digest")
    body = {
        "base": {
            "image": recipe.base.image,
            "tag": recipe.base.tag,
            **({"platform": recipe.platform} if len(recipe.platforms) == 1 else {"platforms": list(recipe.platforms)}),
            "digest": digest,
            "platforms_offered": sorted(platforms),
            "resolved_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    }
    path = lock_path(recipe)
    replace_text(path, json.dumps(body, indent=2) + "\n")
    return path
