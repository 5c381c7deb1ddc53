"""One image reference, ``repository[:tag][@digest]``: its text, its parts, its parser.

Every image reference the project writes (messages, labels, report fields,
compose files, what it asks the engine and the registry for) is the text of
an :class:`ImageReference`, and every reference it reads (a command-line
argument, a recipe key) goes through :meth:`ImageReference.parse`, in the OCI
distribution reference grammar as docker-image-py implements it. A value
built from parts already checked (a recipe's repository, a digest the
registry sent) is formatted as it is; only text from outside is parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from docker_image import digest as oci_digest
from docker_image import reference as oci_reference

from stackbuild.core.errors import ImageReferenceInvalid, UsageError

DOCKER_HUB = oci_reference.DEFAULT_DOMAIN
# An image digest as this project writes and accepts it.
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
# The host serving Docker Hub's registry API; references and credentials call it docker.io.
DOCKER_HUB_API_HOST = "registry-1.docker.io"


@dataclass(frozen=True)
class ImageReference:
    repository: str  # [registry[:port]/]path, no tag
    tag: Optional[str] = None
    digest: Optional[str] = None  # algorithm:hex

    def __str__(self) -> str:
        text = self.repository
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    @classmethod
    def at(cls, repository: str, tag_or_digest: str) -> "ImageReference":
        """``repository`` at the registry API's ``<reference>``: a digest (a tag never holds a colon) or a tag."""
        if ":" in tag_or_digest:
            return cls(repository, digest=tag_or_digest)
        return cls(repository, tag=tag_or_digest)

    def by_digest(self) -> "ImageReference":
        """``repository@digest``: the image itself, whatever its tags name now."""
        if self.digest is None:
            raise ValueError(f"{self} names no digest")
        return ImageReference(self.repository, digest=self.digest)

    def by_tag(self) -> "ImageReference":
        """``repository:tag``: what the tag names now."""
        if self.tag is None:
            raise ValueError(f"{self} names no tag")
        return ImageReference(self.repository, tag=self.tag)

    def by_digest_or_tag(self) -> "ImageReference":
        """By digest when there is one, else by tag (``latest`` when neither): how the engine keeps it locally."""
        if self.digest is not None:
            return self.by_digest()
        return ImageReference(self.repository, tag=self.tag or "latest")

    @property
    def registry(self) -> str:
        """The registry's name as credentials know it: the first component if it is a host, else docker.io."""
        return oci_reference.Reference.split_docker_domain(self.repository)[0]

    @property
    def remote_name(self) -> str:
        """The repository's name inside its registry (``library/`` added for Docker Hub's official images)."""
        return oci_reference.Reference.split_docker_domain(self.repository)[1]

    @property
    def api_host(self) -> str:
        """The host that answers the registry API (``/v2/...``) for this repository."""
        return DOCKER_HUB_API_HOST if self.registry == DOCKER_HUB else self.registry

    @classmethod
    def parse(cls, text: object) -> "ImageReference":
        """``repository[:tag][@digest]`` -> its parts; :class:`ImageReferenceInvalid` for anything else."""
        if not isinstance(text, str):
            raise ImageReferenceInvalid(text, "not a string")
        try:
            parsed = oci_reference.Reference.parse(text)
        except (oci_reference.InvalidReference, oci_digest.InvalidDigest) as exc:
            raise ImageReferenceInvalid(text, str(exc)) from None
        found = cls(parsed["name"], parsed["tag"], parsed["digest"])
        if str(found) != text:  # the grammar's anchor also matches before a final newline
            raise ImageReferenceInvalid(text, "invalid reference format")
        return found


def by_digest(text: str, what: str) -> ImageReference:
    """``REPOSITORY@sha256:<64 hex>`` -> the image by digest (a tag beside the digest is dropped); anything
    else is a :class:`UsageError` (exit 2) whose one line starts with ``what`` (the command and its argument)."""
    try:
        reference = ImageReference.parse(text)
    except ImageReferenceInvalid as exc:
        raise UsageError(
            f"{what}: not an image reference ({exc.reason}); give the image by digest "
            "(REPOSITORY@sha256:...), as the build report's pushed_reference records it"
        ) from None
    if reference.digest is None or not DIGEST_RE.match(reference.digest):
        raise UsageError(
            f"{what}: give the image by digest (REPOSITORY@sha256:...), "
            "as the build report's pushed_reference records it"
        )
    return reference.by_digest()
