"""One tag, several platforms: the OCI image index over a multi-platform recipe's images.

Each platform's image is built, gated and pushed on its own under the
pinned tags suffixed with its architecture (``ImageName.for_architecture``),
and attested by its own digest. :func:`push_index` then puts one OCI image
index naming every platform's manifest under each tag of the recipe, so a
pull picks the puller's platform. :func:`check_index_tags` runs before
anything is tagged or pushed: a pinned tag that already names other images
for any platform (by content, as for a single image) is refused.
"""

from __future__ import annotations

from typing import Mapping

from stackbuild.core.errors import PinnedTagTaken, PushError
from stackbuild.core.naming import ImageName
from stackbuild.image.attach import OCI_INDEX
from stackbuild.image.engine_api import ImageInfo
from stackbuild.image.progress import Progress
from stackbuild.image.registry import Manifest, RegistryClient


def platform_descriptor(platform: str) -> dict:
    os_name, _, architecture = platform.partition("/")
    return {"os": os_name, "architecture": architecture}


def index_document(manifests: Mapping[str, Manifest]) -> dict:
    """The index over ``{platform: pushed manifest}``, in the recipe's platform order."""
    return {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {**manifest.descriptor, "platform": platform_descriptor(platform)}
            for platform, manifest in manifests.items()
        ],
    }


def index_platforms(document: dict) -> dict[str, str]:
    """``{os/architecture: manifest digest}`` of an index document."""
    out = {}
    for entry in document.get("manifests") or []:
        platform = entry.get("platform") or {}
        if platform.get("os") and platform.get("architecture"):
            out[f"{platform['os']}/{platform['architecture']}"] = entry.get("digest", "")
    return out


def check_index_tags(
    client: RegistryClient, name: ImageName, images: Mapping[str, ImageInfo], progress: Progress, *, force: bool = False
) -> None:
    """Refuse (PinnedTagTaken) a pinned tag that names anything but these images, platform for platform.

    ``images``: each platform's image, local or a registry's config; compared by content
    (:meth:`ImageInfo.same_content`) with the config each index entry names.
    """
    for tag in name.pinned_tags:
        found = client.manifest(tag)
        if found is None:
            continue
        remote_platforms = set(index_platforms(found.document)) if "manifests" in found.document else set()
        same = remote_platforms == set(images) and all(
            (remote := client.image(tag, platform)) is not None and client.holds(remote, image)
            for platform, image in images.items()
        )
        if same:
            continue
        ours = ", ".join(f"{platform} {image.id}" for platform, image in images.items())
        if not force:
            raise PinnedTagTaken(
                f"{name.reference(tag)}: the pinned tag already points at {found.digest}, not this build's "
                f"images ({ours}); pinned tags are immutable (--force re-points it); nothing was tagged or pushed"
            )
        progress.note(
            f"--force: re-pointing the pinned tag {name.reference(tag)} from {found.digest} "
            f"to this build's images ({ours})",
            forced_tag=str(name.reference(tag)),
            previous_digest=found.digest,
        )


def push_index(client: RegistryClient, name: ImageName, digests: Mapping[str, str], progress: Progress) -> str:
    """Put the index over ``{platform: pushed manifest digest}`` under every tag of ``name``; return its digest."""
    manifests = {}
    for platform, digest in digests.items():
        found = client.manifest(digest)
        if found is None:
            raise PushError(
                f"{name.reference(digest=digest)}: the registry does not have the {platform} manifest just pushed"
            )
        manifests[platform] = found
    document = index_document(manifests)
    pushed = set()
    for tag in name.tags:
        descriptor, _response = client.push_manifest(document, tag)
        pushed.add(descriptor["digest"])
    (digest,) = pushed
    progress.note(
        f"{name.reference(digest=digest)}: index of {', '.join(manifests)} under {', '.join(name.tags)}",
        index_digest=digest,
    )
    return digest
