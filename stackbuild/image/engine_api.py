"""What the build asks of a container engine: :class:`ContainerEngine`, and the values that cross it.

The pipeline, publish, verify, attest, the SBOM inventory and the oracle
record take a :class:`ContainerEngine` and nothing else of the engine.
:class:`stackbuild.image.engine.DockerEngine` (docker-py, the classic
builder) is the one implementation; another backend (BuildKit through
buildx, say) would implement these methods and return these values, and
none of the callers would change.

An image's id is the engine's name for it and nothing more: handed back to
the engine (tag, read, run), never compared with a registry's digests. The
classic image store names an image by its config's digest, Docker's
containerd image store (the default of new Docker 29 installs) by its
manifest's or index's digest. What a push put in the registry is read back
from the registry (:mod:`stackbuild.image.registry`); whether a registry's
image is a local one is decided by content (:meth:`ImageInfo.same_content`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol

from stackbuild.core.build_report import BuildEngine
from stackbuild.core.reference import ImageReference

Event = dict
EventSink = Callable[[Event], None]


# What a container of the image starts with, as its config holds it (``config`` of an OCI image config,
# ``Config`` of the engine's inspect data): an image is its layers, its labels and these.
RUN_SETTINGS = ("Entrypoint", "Cmd", "Env", "WorkingDir", "User", "ExposedPorts", "Volumes", "StopSignal")


def run_settings(config: Optional[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """``config``'s run settings as (key, JSON) pairs in RUN_SETTINGS' order; a key absent, null or empty is
    left out (an engine and a registry spell "none" either way)."""
    config = config or {}
    return tuple((key, json.dumps(config[key], sort_keys=True)) for key in RUN_SETTINGS if config.get(key))


@dataclass(frozen=True)
class ImageInfo:
    """An image, as the engine (its inspect data) or a registry (its config blob) describes it."""

    id: str  # the engine's name for it (classic store: the config digest; containerd's: the
    # manifest or index digest), or the config digest for a registry's config blob
    os: str
    architecture: str
    labels: Mapping[str, str]
    layers: tuple[str, ...] = ()  # the filesystem layers' diff ids, bottom first (``rootfs.diff_ids``)
    run: tuple[tuple[str, str], ...] = ()  # :func:`run_settings` of its config

    @property
    def platform(self) -> str:
        return f"{self.os}/{self.architecture}"

    def same_content(self, other: "ImageInfo") -> bool:
        """Whether ``other`` is this image by what it holds (platform, layers, labels, run settings), whatever
        each side calls it.

        A local image and a registry's config blob describe the same image when
        they agree on these; the ids are not compared (an engine's id need not be
        the config's digest). Unknown layers on either side are never the same.
        """
        return (
            bool(self.layers)
            and self.layers == other.layers
            and self.platform == other.platform
            and dict(self.labels) == dict(other.labels)
            and self.run == other.run
        )


@dataclass(frozen=True)
class BuildOutcome:
    """A build's result: the image id, or the error and the step that failed (or the last one that ran)."""

    image_id: Optional[str]
    error: Optional[str]
    step_number: Optional[int] = None
    step_total: Optional[int] = None
    step_instruction: Optional[str] = None
    step_output: tuple[str, ...] = ()
    exit_status: Optional[int] = None  # of the failed RUN step


class ContainerEngine(Protocol):
    """The engine operations the build uses, each named for what it does, not how an engine does it."""

    def about(self) -> BuildEngine:
        """The engine's name, version, API version, storage driver, image store and address (for logs, the
        report and the provenance's builder)."""

    def inspect_image(self, reference: str) -> Optional[ImageInfo]:
        """The local image ``reference`` (a tag, a digest reference or an id) names; None if there is none."""

    def registry_digest(
        self,
        reference: ImageReference,
        *,
        deadline: Optional[float] = None,
        on_retry: Optional[EventSink] = None,
    ) -> tuple[str, tuple[str, ...]]:
        """What ``reference`` points to in its registry, and the platforms the engine reads off it (none for a
        single OCI image manifest, whose platform is in its config). With a ``deadline`` (seconds) the
        look-up, retries included, ends within it."""

    def pull(
        self, reference: ImageReference, platform: str, on_event: EventSink, on_retry: Optional[EventSink] = None
    ) -> ImageInfo:
        """Pull ``reference`` (by its digest when it has one) for ``platform``."""

    def build(self, context_dir: str, platform: str, on_event: EventSink, *, nocache: bool = False) -> BuildOutcome:
        """Build the context directory untagged for ``platform``; a failed step is an outcome, not an exception."""

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        """Point ``repository:tag`` at the image, moving it if it named another."""

    def push(
        self, repository: str, tag: str, on_event: EventSink, on_retry: Optional[EventSink] = None
    ) -> Optional[str]:
        """Push ``repository:tag``; the manifest digest, when the engine reports it (the registry has the last word)."""

    def plain_http(self, host: str) -> bool:
        """Whether the registry at ``host`` is spoken to over plain http."""

    def read_file(self, image: str, path: str) -> Optional[bytes]:
        """A file's bytes from an image, without running it; None if the image has no such file."""

    def run(
        self, image: str, entrypoint: list[str], args: list[str], platform: Optional[str] = None
    ) -> tuple[int, str, str]:
        """Run the image once with this entrypoint and arguments, no network: exit code, stdout, stderr."""
