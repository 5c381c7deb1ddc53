"""Tag a built image, push its tags, and read back from the registry what the push put there.

Tags are set only on an image that passed every check (the pipeline calls
:func:`tag_image` last). Pushes use the credentials ``docker login`` stored
in the standard Docker config, retry transient registry errors with
backoff and stop at once on what cannot succeed. What was pushed is what
the registry then holds under the tags (:func:`push_tags` asks it): the
manifest digest and the config it names, whose content must be the local
image's; the engine's own digest (``aux.Digest``), when it sends one, must
agree.

Pinned tags (every tag but ``latest``) are immutable: before anything is
tagged or pushed, :func:`check_pinned_tags` asks the registry what each
pinned tag names, and refuses when it is another image unless ``force`` is
given, which is logged. Whether it is another image is decided by content
(the registry's config blob against the local image: platform, layers,
labels), not by comparing the engine's image id with a registry digest:
the classic image store's id is the config digest, the containerd store's
is a manifest's. ``latest`` always moves.
"""

from __future__ import annotations

from stackbuild.core.errors import PinnedTagTaken, PushError
from stackbuild.core.naming import ImageName
from stackbuild.image.engine_api import ContainerEngine, ImageInfo
from stackbuild.image.progress import Progress
from stackbuild.image.registry import RemoteImage, registry_client


def check_pinned_tags(
    engine: ContainerEngine,
    name: ImageName,
    image: ImageInfo,
    platform: str,
    progress: Progress,
    *,
    force: bool = False,
) -> None:
    """Refuse (PinnedTagTaken) to re-point a pinned tag the registry already has for another image."""
    reader = registry_client(engine, name.repository, progress)
    for tag in name.pinned_tags:
        remote = reader.image(tag, platform)
        if remote is None or reader.holds(remote, image):
            continue
        held = f"{remote.manifest_digest} (image {remote.image_digest or 'none for ' + platform})"
        if not force:
            raise PinnedTagTaken(
                f"{name.reference(tag)}: the pinned tag already points at {held}, not this build's "
                f"image {image.id}; pinned tags are immutable (--force re-points it); nothing was tagged or pushed"
            )
        progress.note(
            f"--force: re-pointing the pinned tag {name.reference(tag)} from {held} to image {image.id}",
            forced_tag=str(name.reference(tag)),
            previous_digest=remote.manifest_digest,
        )


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


def push_tags(
    engine: ContainerEngine, name: ImageName, image: ImageInfo, platform: str, progress: Progress
) -> RemoteImage:
    """Push every tag of ``name``; return what the registry then holds under them (one manifest, ``image``'s config)."""
    client = registry_client(engine, name.repository, progress)
    held: dict[str, RemoteImage] = {}
    for tag in name.tags:
        reported = engine.push(name.repository, tag, lambda m: progress.layer_event("push", m), progress.retry_event)
        remote = client.image(tag, platform)
        if remote is None:
            raise PushError(f"{name.reference(tag)}: pushed, but the registry has no such tag")
        if reported and reported != remote.manifest_digest:
            raise PushError(
                f"{name.reference(tag)}: the engine pushed {reported}, the registry holds "
                f"{remote.manifest_digest} under the tag (another push in between?)"
            )
        held[tag] = remote
    digests = {tag: remote.manifest_digest for tag, remote in held.items()}
    if len(set(digests.values())) != 1:
        raise PushError(f"{name.repository}: tags were pushed with different digests: {digests}")
    pushed = next(iter(held.values()))
    if not client.holds(pushed, image):
        raise PushError(
            f"{name.reference(digest=pushed.manifest_digest)}: the registry's {platform} image "
            f"({pushed.image_digest or 'none'}) is not the local image {image.id} that was pushed"
        )
    return pushed
