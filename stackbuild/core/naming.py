"""Image name and tags of a build: ``latest`` plus a pinned tag.

Tag templates may use ``{date}`` (SOURCE_DATE_EPOCH, UTC), ``{family}``,
``{gpu}`` and ``{rev}``, the build's input set: the commit's first 12 hex
digits when every build input is that commit's (a clean tree, every source
of the build context tracked by git, the recipe in the repository,
SOURCE_DATE_EPOCH not overridden), otherwise ``x`` and 11
hex digits of the sha256 of the inputs themselves (:func:`inputs_digest`).
So two builds of one commit get the same tags, and two builds that can
differ never do. The ``{owner}`` of the repository is the registry
namespace the user pushes to (``--owner`` or ``IMAGE_OWNER``). A
multi-platform recipe's per-platform images are pushed under the pinned
tags suffixed with the architecture (:meth:`ImageName.for_architecture`).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from stackbuild.core.context_sources import context_sources
from stackbuild.core.errors import OwnerMissing, RecipeError, UsageError
from stackbuild.core.lock import LOCK_NAME, pinned_base
from stackbuild.core.recipe import REPO_ROOT, Recipe, check_repository
from stackbuild.core.reference import ImageReference

OWNER_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
OWNER_VARIABLE = "IMAGE_OWNER"
# The namespace of images that stay in the local engine when no owner is given; never pushed.
LOCAL_OWNER = "local"
MOVING_TAGS = ("latest",)


OWNER_FROM_ENVIRONMENT = f"{OWNER_VARIABLE} (environment)"


def check_owner(owner: str, origin: str = "--owner") -> str:
    """``owner`` if it is a registry namespace; else a UsageError naming where it came from (``--owner``,
    the environment) with the namespace it probably means (``acme`` for ``Acme``)."""
    if OWNER_RE.match(owner):
        return owner
    guess = re.sub(r"[^a-z0-9._-]+", "-", owner.strip().lower()).strip("._-")
    guess = re.sub(r"[._-]{2,}", "-", guess)
    hint = f"; use {guess!r}" if guess and OWNER_RE.match(guess) else ""
    raise UsageError(
        f"{origin} {owner!r}: not a valid registry namespace (lowercase letters, digits, and . _ - between them){hint}"
    )


@dataclass(frozen=True)
class ImageName:
    repository: str  # registry/namespace/name, no tag
    tags: tuple[str, ...]
    # True when the recipe's {owner} was filled with a stand-in (no --owner / IMAGE_OWNER).
    owner_missing: bool = False

    def require_owner(self, recipe: Recipe, action: str) -> None:
        """Raise :class:`OwnerMissing` when ``action`` (a push) would go to a stand-in owner."""
        if self.owner_missing:
            raise OwnerMissing(
                f"{recipe.path}: image.repository: {recipe.image.repository} has no owner to {action}: "
                f"pass --owner or set {OWNER_VARIABLE} (the registry namespace you push to)"
            )

    @property
    def registry(self) -> str:
        return ImageReference(self.repository).registry

    def reference(self, tag: Optional[str] = None, *, digest: Optional[str] = None) -> ImageReference:
        """The image under ``tag``, or by ``digest``."""
        return ImageReference(self.repository, tag, digest)

    @property
    def references(self) -> tuple[str, ...]:
        """Every tag's ``repository:tag``, as reports and the engine take them."""
        return tuple(str(self.reference(t)) for t in self.tags)

    @property
    def pinned_tags(self) -> tuple[str, ...]:
        """Every tag but the moving ones: these never name another image."""
        return tuple(t for t in self.tags if t not in MOVING_TAGS)

    def for_architecture(self, architecture: str) -> "ImageName":
        """The tags one platform's image of a multi-platform recipe is pushed under: ``<pinned>-<arch>``."""
        return ImageName(self.repository, tuple(f"{t}-{architecture}" for t in self.pinned_tags))


@dataclass(frozen=True)
class SourceRevision:
    """The source a build comes from: the commit, and whether the build inputs are exactly that commit's."""

    commit: Optional[str]  # full hex, None without git
    tree_clean: bool  # no tracked file differs from the commit
    inputs_committed: bool  # and every build input is a committed file, SOURCE_DATE_EPOCH the commit's

    @property
    def label(self) -> str:
        """``org.opencontainers.image.revision``: the commit, ``-dirty`` when tracked files differ."""
        if self.commit is None:
            return "unknown"
        return self.commit + ("" if self.tree_clean else "-dirty")


def _git(repo: Path, *args: str) -> Optional[str]:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def _commit_time(repo: Path) -> Optional[int]:
    out = _git(repo, "log", "-1", "--format=%ct")
    return int(out.strip()) if out and out.strip().isdigit() else None


def source_date_epoch(repo: Path = REPO_ROOT) -> int:
    """SOURCE_DATE_EPOCH if set, else the time of the last commit, else 0."""
    value = os.environ.get("SOURCE_DATE_EPOCH")
    if value:
        if not value.isdigit():
            raise RecipeError("SOURCE_DATE_EPOCH", "", f"must be a number of seconds, got {value!r}")
        return int(value)
    return _commit_time(repo) or 0


def input_files(recipe: Recipe, repo: Path = REPO_ROOT) -> dict[str, Path]:
    """The files the digest hashes: the build context's sources (:func:`context_sources`) but the lock.

    The lock counts by the digest it pins (:func:`inputs_digest`), not by its bytes: it records when it was resolved.
    """
    files = context_sources(recipe, repo)
    files.pop(f"recipe/{LOCK_NAME}", None)
    return files


def _all_committed(paths: list[Path], repo: Path) -> bool:
    """Whether every one of ``paths`` lies in ``repo`` and git tracks it (untracked and ignored files do not count)."""
    root = repo.resolve()
    listed = _git(repo, "ls-files", "-z")
    if listed is None:
        return False
    tracked = set(listed.split("\0"))
    for path in paths:
        resolved = path.resolve()
        if not resolved.is_relative_to(root) or resolved.relative_to(root).as_posix() not in tracked:
            return False
    return True


def inputs_digest(files: dict[str, Path], epoch: int, revision_label: str, base_digest: Optional[str]) -> str:
    """sha256 over the build inputs' names and bytes, the base digest, the epoch and the revision label
    (in the labels)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{hashlib.sha256(files[name].read_bytes()).hexdigest()}\n".encode())
    digest.update(f"base={base_digest or 'unpinned'}\nSOURCE_DATE_EPOCH={epoch}\nrevision={revision_label}\n".encode())
    return digest.hexdigest()


def source_revision(recipe: Recipe, epoch: int, repo: Path = REPO_ROOT) -> SourceRevision:
    head = _git(repo, "rev-parse", "HEAD")
    if not head:
        return SourceRevision(None, False, False)
    tracked = _git(repo, "status", "--porcelain", "--untracked-files=no")
    tree_clean = tracked is not None and not tracked.strip()
    committed = (
        tree_clean
        and epoch == _commit_time(repo)
        and _all_committed(list(context_sources(recipe, repo).values()), repo)
    )
    return SourceRevision(head.strip(), tree_clean, committed)


def revision_tag_field(
    recipe: Recipe, epoch: int, source: SourceRevision, base_digest: Optional[str], repo: Path = REPO_ROOT
) -> str:
    """``{rev}``: the commit's first 12 hex digits, or ``x`` + 11 of the inputs' digest."""
    if source.inputs_committed and source.commit:
        return source.commit[:12]
    return "x" + inputs_digest(input_files(recipe, repo), epoch, source.label, base_digest)[:11]


def format_tags(recipe: Recipe, *, epoch: int, rev: str) -> tuple[str, ...]:
    """The one formatter of the recipe's tag templates."""
    when = datetime.fromtimestamp(epoch, tz=timezone.utc)
    fields = {
        "date": when.strftime("%Y%m%d"),
        "family": recipe.hardware.capability_family,
        "gpu": recipe.hardware.gpu_tag,
        "rev": rev,
    }
    return tuple(dict.fromkeys(t.format(**fields) for t in recipe.image.tags))


def image_name(
    recipe: Recipe,
    *,
    owner: str | None = None,
    repository: str | None = None,
    epoch: int | None = None,
    source: Optional[SourceRevision] = None,
    base_digest: Optional[str] = None,
    owner_fallback: str = LOCAL_OWNER,
) -> ImageName:
    """Resolve the recipe's repository template and tag templates (``base_digest``: default, the recipe's or lock's).

    Without an owner (``owner``, else IMAGE_OWNER) ``{owner}`` becomes ``owner_fallback`` and the
    name says so (``owner_missing``): such an image is never pushed.
    """
    if repository is not None:
        check_repository("--repository", "", repository)
    repo = repository or recipe.image.repository
    missing = False
    if "{owner}" in repo:
        if not owner and os.environ.get(OWNER_VARIABLE):
            owner = check_owner(os.environ[OWNER_VARIABLE], OWNER_FROM_ENVIRONMENT)
        if owner:
            check_owner(owner)
            repo = repo.replace("{owner}", owner)
            check_repository(recipe.path, "image.repository", repo)
        else:
            missing = True
            repo = repo.replace("{owner}", owner_fallback)
    epoch = source_date_epoch() if epoch is None else epoch
    needs_rev = any("{rev}" in t for t in recipe.image.tags)
    rev = ""
    if needs_rev:
        if base_digest is None:
            base_digest = pinned_base(recipe, allow_unpinned=True).digest
        rev = revision_tag_field(recipe, epoch, source or source_revision(recipe, epoch), base_digest)
    return ImageName(repo, format_tags(recipe, epoch=epoch, rev=rev), missing)


# What a source URL holds when nobody filled it in: the template's {owner}, or a stand-in OWNER.
SOURCE_PLACEHOLDER_RE = re.compile(r"\{owner\}|\bOWNER\b")
_SCP_REMOTE_RE = re.compile(r"^(?:[^@/]+@)?([^:/]+):(?!//)(.+)$")  # git@github.com:acme/repo.git


def https_form(remote: str) -> str:
    """A git remote as the https URL of its repository (no credentials, no port, no ``.git``); "" for a
    remote that is no network URL (a path on this machine)."""
    url = remote.strip()
    scp = _SCP_REMOTE_RE.match(url)
    if scp and "://" not in url:
        url = f"https://{scp.group(1)}/{scp.group(2)}"
    found = re.match(r"^(?:ssh|git|http|https)://(?:[^@/]+@)?([^/:]+)(?::\d+)?/(.+)$", url)
    if not found:
        return ""
    return f"https://{found.group(1)}/{found.group(2).removesuffix('/').removesuffix('.git')}"


def image_source(recipe: Recipe, owner: Optional[str] = None, repo: Path = REPO_ROOT) -> str:
    """The ``org.opencontainers.image.source`` label: ``image.source`` with ``{owner}`` filled (``owner``,
    else IMAGE_OWNER; left as it is without one), or, when the recipe gives none, the https form of
    the checkout's ``origin`` remote ("" without one)."""
    template = recipe.image.source
    if template is None:
        remote = _git(repo, "remote", "get-url", "origin")
        return https_form(remote) if remote and remote.strip() else ""
    owner = owner or os.environ.get(OWNER_VARIABLE)
    return template.replace("{owner}", owner) if owner else template


def require_real_source(recipe: Recipe, source: str) -> None:
    """Refuse a push whose source label still holds a placeholder (GHCR links the package by it)."""
    found = SOURCE_PLACEHOLDER_RE.search(source)
    if found:
        fill = (
            ("pass --owner or set " + OWNER_VARIABLE) if found.group(0) == "{owner}" else "write the repository's URL"
        )
        raise RecipeError(
            recipe.path,
            "image.source",
            f"{source} still holds the placeholder {found.group(0)}; {fill} "
            "(it names the repository the registry links the image to)",
        )


def checkout_label(repo: Path = REPO_ROOT) -> str:
    """This checkout's commit as the revision label writes it (``-dirty``, ``unknown``)."""
    head = _git(repo, "rev-parse", "HEAD")
    tracked = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return SourceRevision(head.strip() if head else None, tracked is not None and not tracked.strip(), False).label
