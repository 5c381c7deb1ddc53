"""Tag a built image and push its tags.

Tags are set only on an image that passed every check (the pipeline calls
:func:`tag_image` last). Pushes use the credentials ``docker login`` stored
in the standard Docker config, retry transient registry errors with
backoff and stop at once on what cannot succeed. The pushed digest is the
engine's ``aux.Digest``; a HEAD on the manifest is the fallback.

Pinned tags (every tag but ``latest``) are immutable: before anything is
tagged or pushed, :func:`check_pinned_tags` asks the registry what each
pinned tag names, and refuses when it is another image (another image
config digest, the same thing the local engine calls the image id) unless
``force`` is given, which is logged. ``latest`` always moves.
"""
from __future__ import annotations

from typing import Optional

from stackbuild.image.engine_api import ContainerEngine, ImageInfo
from stackbuild.core.errors import PinnedTagTaken, PushError
from stackbuild.core.naming import ImageName
from stackbuild.image.progress import Progress
from stackbuild.image.registry import RegistryClient



def check_pinned_tags(engine: ContainerEngine, name: ImageName, image_id: str, platform: str, progress: Progress, *,
                      force: bool = False) -> None:
    """Refuse (PinnedTagTaken) to re-point a pinned tag the registry already has for another image."""
    reader = RegistryClient(name.repository, plain_http=engine.plain_http(name.registry), on_retry=progress.retry_event)
    for tag in name.pinned_tags:
        remote = reader.image(tag, platform)
        if remote is None or remote.image_digest == image_id:
            continue
        held = f"{remote.manifest_digest} (image {remote.image_digest or 'none for ' + platform})"
        if not force:
            raise PinnedTagTaken(f"{name.reference(tag)}: the pinned tag already points at {held}, not this build's "
                                 f"image {image_id}; pinned tags are immutable (--force re-points it); nothing was tagged or pushed")
        progress.note(f"--force: re-pointing the pinned tag {name.reference(tag)} from {held} to image {image_id}",
                      forced_tag=str(name.reference(tag)), previous_digest=remote.manifest_digest)


def tag_image(engine: ContainerEngine, image_id: str, name: ImageName) -> list[str]:
    for tag in name.tags:
        engine.tag(image_id, name.repository, tag)
    return list(name.references)


def local_image_of(engine: ContainerEngine, name: ImageName) -> ImageInfo:
    """The one local image every tag of ``name`` points to; PushError if missing or split."""
    ids = {}
    for reference in name.references:
        found = engine.inspect_image(reference)
        if found is None:
            raise PushError(f"{reference}: no such image in the local engine; build it first (build.py build)")
        ids[reference] = found
    distinct = {found.id for found in ids.values()}
    if len(distinct) != 1:
        listing = ", ".join(f"{ref} -> {found.id[:19]}" for ref, found in ids.items())
        raise PushError(f"{name.repository}: the tags point to different images ({listing}); rebuild before pushing")
    return next(iter(ids.values()))


def push_tags(engine: ContainerEngine, name: ImageName, progress: Progress) -> str:
    """Push every tag of ``name``; return the manifest digest they share."""
    digests: dict[str, Optional[str]] = {}
    for tag in name.tags:
        digest = engine.push(name.repository, tag, lambda m: progress.layer_event("push", m), progress.retry_event)
        if not digest:
            digest = engine.manifest_digest(name.repository, tag, progress.retry_event)
            progress.note(f"{name.reference(tag)}: the engine sent no digest; the registry says {digest}")
        digests[tag] = digest
    distinct = set(digests.values())
    if len(distinct) != 1:
        raise PushError(f"{name.repository}: tags were pushed with different digests: {digests}")
    return distinct.pop()
