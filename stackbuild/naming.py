"""Image name and tags of a build: ``latest`` plus a pinned tag.

The pinned tag's date comes from SOURCE_DATE_EPOCH, so two builds of the
same commit get the same tags, and the ``{owner}`` of the repository is the
registry namespace the user pushes to (``--owner`` or ``IMAGE_OWNER``).
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .errors import OwnerMissing, RecipeError
from .recipe import REPO_ROOT, Recipe, check_repository

OWNER_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
OWNER_VARIABLE = "IMAGE_OWNER"
# The namespace of images that stay in the local engine when no owner is given; never pushed.
LOCAL_OWNER = "local"


@dataclass(frozen=True)
class ImageName:
    repository: str  # registry/namespace/name, no tag
    tags: tuple[str, ...]
    # True when the recipe's {owner} was filled with a stand-in (no --owner / IMAGE_OWNER).
    owner_missing: bool = False

    def require_owner(self, recipe: Recipe, action: str) -> None:
        """Raise :class:`OwnerMissing` when ``action`` (a push) would go to a stand-in owner."""
        if self.owner_missing:
            raise OwnerMissing(f"{recipe.path}: image.repository: {recipe.image.repository} has no owner to {action}: "
                               f"pass --owner or set {OWNER_VARIABLE} (the registry namespace you push to)")

    @property
    def registry(self) -> str:
        first = self.repository.split("/", 1)[0]
        return first if ("." in first or ":" in first or first == "localhost") else "docker.io"

    @property
    def references(self) -> tuple[str, ...]:
        return tuple(f"{self.repository}:{t}" for t in self.tags)


def source_date_epoch(repo: Path = REPO_ROOT) -> int:
    """SOURCE_DATE_EPOCH if set, else the time of the last commit, else 0."""
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if value:
        if not value.isdigit():
            raise RecipeError("SOURCE_DATE_EPOCH", "", f"must be a number of seconds, got {value!r}")
        return int(value)
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "log", "-1", "--format=%ct"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        return int(out)
    except (OSError, subprocess.CalledProcessError, ValueError):
        return 0


def image_name(recipe: Recipe, *, owner: str | None = None, repository: str | None = None, epoch: int | None = None,
               owner_fallback: str = LOCAL_OWNER) -> ImageName:
    """Resolve the recipe's repository template and tag templates.

    Without an owner (``owner``, else IMAGE_OWNER) ``{owner}`` becomes ``owner_fallback`` and the
    name says so (``owner_missing``): such an image is never pushed.
    """
    if repository is not None:
        check_repository("--repository", "", repository)
    repo = repository or recipe.image.repository
    missing = False
    if "{owner}" in repo:
        owner = owner or os.environ.get(OWNER_VARIABLE)
        if owner:
            if not OWNER_RE.match(owner):
                raise RecipeError(recipe.path, "image.repository", f"owner {owner!r} is not a valid registry namespace (lowercase letters, digits, . _ -)")
            repo = repo.replace("{owner}", owner)
            check_repository(recipe.path, "image.repository", repo)
        else:
            missing = True
            repo = repo.replace("{owner}", owner_fallback)
    when = datetime.fromtimestamp(source_date_epoch() if epoch is None else epoch, tz=timezone.utc)
    fields = {"date": when.strftime("%Y%m%d"), "family": recipe.hardware.capability_family, "gpu": recipe.hardware.gpu.lower()}
    tags = tuple(dict.fromkeys(t.format(**fields) for t in recipe.image.tags))
    return ImageName(repo, tags, missing)
