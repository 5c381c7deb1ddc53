"""Which image reference a generated serving file names (compose files, Kubernetes manifests).

By digest from --digest (with this tree's pinned tag) or from a build report of this recipe
pushed to this repository (with the pinned tag that build pushed); else the recipe's moving
tag (``latest``), marked UNPINNED, with the reason why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from stackbuild.core.build_report import DEFAULT_REPORT, read_report
from stackbuild.core.errors import ComposeOverrideError
from stackbuild.core.naming import MOVING_TAGS, OWNER_VARIABLE, image_name
from stackbuild.core.recipe import Recipe
from stackbuild.core.reference import DIGEST_RE, ImageReference

# The image owner when none is given or found in a build report: Compose reads IMAGE_OWNER
# when the file is used, and refuses to start without it.
OWNER_FROM_ENV = (
    "${" + OWNER_VARIABLE + ":?set " + OWNER_VARIABLE + " to the registry namespace the image was pushed to}"
)


@dataclass(frozen=True)
class ImagePin:
    repository: str
    tag: str
    digest: Optional[str]
    digest_source: str  # "--digest", the report path, or "" when unpinned
    unpinned_because: str = ""  # why no digest was taken from the build report
    owner_note: str = ""  # where the owner came from, when not from --owner / IMAGE_OWNER

    @property
    def reference(self) -> str:
        """``repository:tag[@digest]``; the repository may hold Compose's ``${IMAGE_OWNER:?...}``."""
        return str(ImageReference(self.repository, self.tag, self.digest))

    @property
    def owner_from_env(self) -> bool:
        """Whether the repository leaves the owner to Compose's ``${IMAGE_OWNER:?...}``."""
        return OWNER_FROM_ENV in self.repository

    @property
    def notices(self) -> tuple[str, ...]:
        """Where the owner came from, and why the image is not pinned by digest (when it is not)."""
        return tuple(n for n in (self.owner_note, self.unpinned_because and f"unpinned: {self.unpinned_because}") if n)

    def summary(self) -> dict:
        """The pin as the writers' --json reports it."""
        return {
            "image": self.reference,
            "pinned": bool(self.digest),
            "digest_source": self.digest_source or None,
            "unpinned_because": self.unpinned_because or None,
            "owner_note": self.owner_note or None,
        }


def _owner_from_report(recipe: Recipe, report: Optional[dict]) -> Optional[str]:
    """The owner a build report of this recipe pushed to, when its repository fits the recipe's template."""
    if not report or report.get("recipe_name") != recipe.name or not isinstance(report.get("image"), str):
        return None
    pattern = re.escape(recipe.image.repository).replace(re.escape("{owner}"), "([a-z0-9]+(?:[._-][a-z0-9]+)*)")
    match = re.fullmatch(pattern, report["image"])
    return match.group(1) if match else None


def _unpinned_because(recipe: Recipe, report: Optional[dict], report_path: Path, repository: str) -> str:
    """Why the build report gives no digest for this file ("" when it does)."""
    if report is None:
        return f"no readable build report at {report_path} (pass --digest, or build and push first)"
    if report.get("recipe_name") not in (None, recipe.name):
        return f"{report_path} is the report of recipe {report.get('recipe_name')!r}, not {recipe.name!r}"
    if not report.get("pushed_digest"):
        return f"{report_path} records no push (status {report.get('status')!r})"
    if report.get("image") not in (None, repository):
        return f"{report_path} pushed {report.get('image')}, not {repository}"
    if not DIGEST_RE.match(str(report["pushed_digest"])):
        return f"{report_path}: pushed_digest {report['pushed_digest']!r} is not a sha256 digest"
    return ""


def resolve_image(
    recipe: Recipe,
    *,
    owner: Optional[str] = None,
    repository: Optional[str] = None,
    digest: Optional[str] = None,
    report_path: Optional[Path] = None,
) -> ImagePin:
    """The image by digest from --digest (with this tree's pinned tag) or the last build report
    (with the tag that build pushed).

    Without either, the build that made the image is unknown, and so is its pinned tag (it
    names the commit, ``{rev}``): the file then names the recipe's moving tag (``latest``),
    marked UNPINNED, rather than a pinned tag of a build that may not exist.

    The owner is ``owner`` (--owner / IMAGE_OWNER), else the one a build report of this recipe
    pushed to, else Compose's ``${IMAGE_OWNER:?...}`` (the file asks for it when used).
    """
    report_path = Path(report_path) if report_path else DEFAULT_REPORT
    report = read_report(report_path)
    if not isinstance(report, dict):
        report = None
    name = image_name(recipe, owner=owner, repository=repository, owner_fallback=OWNER_FROM_ENV)
    owner_note = ""
    if name.owner_missing:
        reported = _owner_from_report(recipe, report)
        if reported:
            name = image_name(recipe, owner=reported, repository=repository)
            owner_note = f"image owner {reported!r} taken from {report_path}"
        else:
            owner_note = (
                f"no image owner given (--owner, {OWNER_VARIABLE}) or found in {report_path}: "
                f"the compose file reads {OWNER_VARIABLE} when it is used"
            )
    if digest is not None:
        if not DIGEST_RE.match(digest):
            raise ComposeOverrideError(
                f"--digest: expected 'sha256:' followed by 64 lowercase hex digits, got {digest!r}"
            )
        pinned = next(iter(name.pinned_tags), name.tags[0])
        return ImagePin(name.repository, pinned, digest, "--digest", owner_note=owner_note)
    tag = next((t for t in name.tags if t in MOVING_TAGS), name.tags[0])
    # Only a report of this recipe, pushed to this repository, pins this file.
    why = _unpinned_because(recipe, report, report_path, name.repository)
    if why:
        return ImagePin(name.repository, tag, None, "", unpinned_because=why, owner_note=owner_note)
    tags = [t for t in report.get("tags") or () if isinstance(t, str)]
    tag = next((t for t in tags if t not in MOVING_TAGS), tag)
    return ImagePin(name.repository, tag, str(report["pushed_digest"]), str(report_path), owner_note=owner_note)
