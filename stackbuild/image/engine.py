"""The Docker engine: :class:`DockerEngine`, the implementation of :class:`ContainerEngine`.

Everything the driver asks of a container engine is a method of the
interface in :mod:`stackbuild.image.engine_api`: say what it is, resolve a
base digest, pull, build from a context directory, inspect, tag, push, read
a file back from an image, run a command in it. :class:`DockerEngine` speaks the engine
API through docker-py (classic builder) and turns the API's inspect data
into :class:`ImageInfo` values; :mod:`stackbuild.image.connect` connects it the standard way
(``DOCKER_HOST`` or the default socket). Another backend would be another class
implementing the same interface.

Credentials are never ours: pulls and pushes send what ``docker login``
stored in the standard Docker config (``DOCKER_CONFIG`` or ``~/.docker``),
which docker-py reads itself.

Errors inside the JSON streams (``error`` / ``errorDetail`` with HTTP 200)
are detected here and turned into the driver's exceptions; registry errors
are classified by :mod:`stackbuild.image.registry_errors` (authentication refused,
final, or transient: retried with backoff by the caller's policy).
"""

from __future__ import annotations

import io
import ipaddress
import re
import tarfile
from types import MappingProxyType
from typing import Optional

import docker
import docker.errors
import requests

from stackbuild.core.build_report import BuildEngine
from stackbuild.core.errors import ImageIncomplete, LockError, PullError, RegistryUnavailable
from stackbuild.core.reference import ImageReference
from stackbuild.image.engine_api import BuildOutcome, Event, EventSink, ImageInfo, run_settings
from stackbuild.image.engine_errors import api_error_text, engine_errors
from stackbuild.image.registry_errors import classify_registry_error, nobody_answers_at, registry_retry

DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def _exit_status(message: Event) -> Optional[int]:
    """The exit status of the failed RUN step a build stream's error message reports, if any.

    The classic builder sends it as ``errorDetail.code`` and in the text
    (``... returned a non-zero code: N``).
    """
    detail = message.get("errorDetail")
    if isinstance(detail, dict) and isinstance(detail.get("code"), int) and detail["code"] > 0:
        return detail["code"]
    found = NONZERO_RE.search(str(message.get("error") or ""))
    return int(found.group(1)) if found else None


def _stream_error(message: Event) -> Optional[str]:
    """The error a stream message carries, if any (they come with HTTP 200)."""
    if "error" in message or "errorDetail" in message:
        detail = message.get("errorDetail") or {}
        text = message.get("error") or (detail.get("message") if isinstance(detail, dict) else str(detail))
        return str(text or "unknown error").strip()
    return None


NONZERO_RE = re.compile(r"returned a non-zero code: (\d+)")
STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)$", re.S)
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # the classic builder colours a step's stderr


class DockerEngine:
    """The classic Docker engine API through docker-py; implements :class:`ContainerEngine`."""

    def __init__(self, client: docker.DockerClient, endpoint: str = DEFAULT_SOCKET):
        self.client = client
        self.api = client.api
        self.endpoint = endpoint  # where it answers, as the user would name it (DOCKER_HOST's form)

    # ----------------------------------------------------------------- queries
    def about(self) -> BuildEngine:
        """``docker version`` and ``docker info``: the server's version and API version,
        its storage driver and image store."""
        version, info = self.api.version(), self.api.info()
        return engine_of(version, info, self.endpoint)

    def inspect_image(self, reference: str) -> Optional[ImageInfo]:
        try:
            return _image_info(self.api.inspect_image(reference))
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            if exc.status_code == 404:
                return None
            raise

    def registry_digest(
        self,
        reference: ImageReference,
        *,
        deadline: Optional[float] = None,
        on_retry: Optional[EventSink] = None,
    ) -> tuple[str, tuple[str, ...]]:
        """What ``reference`` points to in its registry, and the platforms the engine reads off it.

        Asked through the daemon (distribution inspect), so the standard
        credentials apply; with a ``deadline`` (seconds) each request and the
        retries together end within it. The engine names the platforms of an
        index and of a Docker v2 manifest, none of a single OCI image manifest
        (what Docker's containerd image store pushes): its platform is in its config.
        """
        what = f"{reference}: distribution inspect"
        registry = reference.registry

        def ask() -> dict:
            try:
                return self.api.inspect_distribution(str(reference))
            except docker.errors.APIError as exc:
                raise classify_registry_error(what, api_error_text(exc), registry, LockError) from None
            except requests.exceptions.Timeout:
                # The engine did not answer in time: the registry may be gone, or the engine slow.
                nobody = nobody_answers_at(reference.api_host)
                if nobody:
                    raise RegistryUnavailable(
                        f"{what}: registry unreachable (not retried): {reference.api_host}: {nobody}"
                    ) from None
                raise RegistryUnavailable(
                    f"{what}: the engine gave no answer within {self.api.timeout:g} s "
                    f"(it asks the registry, and {reference.api_host} accepts connections)"
                ) from None

        saved = self.api.timeout
        if deadline is not None:
            self.api.timeout = deadline
        try:
            with engine_errors(what):
                data = registry_retry(what, on_retry, deadline)(ask)
        finally:
            self.api.timeout = saved
        digest = data.get("Descriptor", {}).get("digest", "")
        offered = []
        for p in data.get("Platforms") or []:
            name = f"{p.get('os')}/{p.get('architecture')}" + (f"/{p['variant']}" if p.get("variant") else "")
            offered.append(name)
        return digest, tuple(sorted(set(offered)))

    # ------------------------------------------------------------------- pull
    def pull(
        self, reference: ImageReference, platform: str, on_event: EventSink, on_retry: Optional[EventSink] = None
    ) -> ImageInfo:
        """Pull ``reference`` (by its digest when it has one) for ``platform``; return the image pulled."""
        local = reference.by_digest_or_tag()
        what = f"pull {reference}"
        registry = reference.registry

        def attempt() -> None:
            try:
                for message in self.api.pull(
                    local.repository, tag=local.digest or local.tag, stream=True, decode=True, platform=platform
                ):
                    error = _stream_error(message)
                    if error:
                        raise classify_registry_error(what, error, registry, PullError)
                    on_event(message)
            except docker.errors.APIError as exc:
                raise classify_registry_error(what, api_error_text(exc), registry, PullError) from None

        registry_retry(what, on_retry)(attempt)
        pulled = self.inspect_image(str(local))
        if pulled is None:
            raise PullError(f"{what}: the engine reported success but the image is not there")
        if not pulled.architecture:
            raise ImageIncomplete(
                f"{what}: the engine holds it without its platform, some of its layers missing: it has those "
                "layers unpacked for another image (the same files, compressed otherwise) and fetched none of "
                "them; remove the images sharing those layers (docker image rm), then build again"
            )
        return pulled

    # ------------------------------------------------------------------ build
    def build(self, context_dir: str, platform: str, on_event: EventSink, *, nocache: bool = False) -> BuildOutcome:
        """Build the context with the classic builder, untagged; never raises on a failed step.

        ``on_event`` gets ``{"step": n, "total": m, "instruction": ...}`` when a
        step starts and ``{"output": line}`` for each line it prints.
        """
        stream = self.api.build(
            path=context_dir,
            platform=platform,
            decode=True,
            rm=True,
            forcerm=True,
            pull=False,
            nocache=nocache,
            timeout=None,
        )
        image_id = None
        step: dict = {}
        output: list[str] = []
        pending = ""
        for message in stream:
            error = _stream_error(message)
            if error:
                if pending.strip():
                    output.append(ANSI_RE.sub("", pending).rstrip())
                return BuildOutcome(
                    None,
                    error,
                    step.get("n"),
                    step.get("total"),
                    step.get("instruction"),
                    tuple(output),
                    _exit_status(message),
                )
            aux = message.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image_id = aux["ID"]
            text = message.get("stream")
            if text is None:
                if message.get("status"):  # a pull the builder does itself, should it happen
                    on_event({"output": message["status"] + (" " + message["id"] if message.get("id") else "")})
                continue
            pending += text
            *lines, pending = pending.split("\n")
            for line in lines:
                line = ANSI_RE.sub("", line).rstrip("\r")
                match = STEP_RE.match(line)
                if match:
                    step = {
                        "n": int(match.group(1)),
                        "total": int(match.group(2)),
                        "instruction": match.group(3).strip(),
                    }
                    output = []
                    on_event({"step": step["n"], "total": step["total"], "instruction": step["instruction"]})
                    continue
                if line.startswith(" ---> ") or line.startswith("Removing intermediate container"):
                    continue  # the builder's own bookkeeping
                if line.startswith("Successfully built "):
                    image_id = image_id or line.split()[-1]
                    continue
                output.append(line)
                del output[:-200]
                on_event({"output": line})
        if image_id and not image_id.startswith("sha256:"):
            found = self.inspect_image(image_id)
            image_id = found.id if found else image_id
        if not image_id:
            return BuildOutcome(
                None,
                "the builder finished without an image id",
                step.get("n"),
                step.get("total"),
                step.get("instruction"),
                tuple(output),
            )
        return BuildOutcome(image_id, None, step.get("n"), step.get("total"), step.get("instruction"), tuple(output))

    # -------------------------------------------------------------- tag, push
    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.api.tag(image_id, repository, tag, force=True)

    def push(
        self, repository: str, tag: str, on_event: EventSink, on_retry: Optional[EventSink] = None
    ) -> Optional[str]:
        """Push ``repository:tag``; return the manifest digest the engine reports (``aux.Digest``)."""
        reference = ImageReference(repository, tag=tag)
        what = f"push {reference}"
        registry = reference.registry

        def attempt() -> Optional[str]:
            digest = None
            try:
                for message in self.api.push(repository, tag=tag, stream=True, decode=True):
                    error = _stream_error(message)
                    if error:
                        raise classify_registry_error(what, error, registry)
                    aux = message.get("aux")
                    if isinstance(aux, dict) and aux.get("Digest"):
                        digest = aux["Digest"]
                    on_event(message)
            except docker.errors.APIError as exc:
                raise classify_registry_error(what, api_error_text(exc), registry) from None
            return digest

        return registry_retry(what, on_retry)(attempt)

    def plain_http(self, host: str) -> bool:
        """Whether the engine speaks plain http to ``host``: loopback, or one of its insecure registries."""
        hostname = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        insecure = hostname == "localhost"
        try:
            insecure = insecure or ipaddress.ip_address(hostname).is_loopback
        except ValueError:
            pass
        if not insecure:
            config = self.api.info().get("RegistryConfig") or {}
            index = (config.get("IndexConfigs") or {}).get(host) or {}
            insecure = index.get("Secure") is False
        return insecure

    # ------------------------------------------------------- look inside images
    def read_file(self, image: str, path: str) -> Optional[bytes]:
        """A file's bytes from an image, through a created-not-started container."""
        container = self.api.create_container(image, command=["/nonexistent"], entrypoint=[], network_disabled=True)
        try:
            try:
                chunks, _stat = self.api.get_archive(container["Id"], path)
            except docker.errors.NotFound:
                return None
            archive = io.BytesIO(b"".join(chunks))
            with tarfile.open(fileobj=archive) as tar:
                member = next((m for m in tar.getmembers() if m.isfile()), None)
                if member is None:
                    return None
                handle = tar.extractfile(member)
                return handle.read() if handle else None
        finally:
            self.api.remove_container(container["Id"], force=True)

    def run(
        self, image: str, entrypoint: list[str], args: list[str], platform: Optional[str] = None
    ) -> tuple[int, str, str]:
        """``docker run --rm --entrypoint ... IMAGE args``: exit code, stdout, stderr."""
        kwargs = {"platform": platform} if platform else {}
        container = self.api.create_container(
            image, command=args, entrypoint=entrypoint, network_disabled=True, **kwargs
        )
        try:
            self.api.start(container["Id"])
            status = self.api.wait(container["Id"], timeout=None)
            out = self.api.logs(container["Id"], stdout=True, stderr=False).decode("utf-8", "replace")
            err = self.api.logs(container["Id"], stdout=False, stderr=True).decode("utf-8", "replace")
            return int(status.get("StatusCode", 1)), out, err
        finally:
            self.api.remove_container(container["Id"], force=True)


def _image_info(inspected: dict) -> ImageInfo:
    """The engine API's image inspect document (``GET /images/{name}/json``) as an :class:`ImageInfo`.

    ``Id`` is the store's name for the image (the config digest in the classic
    store, the manifest or index digest in containerd's): kept as the id only.
    """
    config = inspected.get("Config") or {}
    layers = (inspected.get("RootFS") or {}).get("Layers") or ()
    return ImageInfo(
        id=inspected["Id"],
        os=inspected.get("Os") or "",
        architecture=inspected.get("Architecture") or "",
        labels=MappingProxyType(dict(config.get("Labels") or {})),
        layers=tuple(layers),
        run=run_settings(config),
    )


CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"


def engine_of(version: dict, info: dict, endpoint: str) -> BuildEngine:
    """The engine API's ``GET /version`` and ``GET /info`` documents as a :class:`BuildEngine`.

    Docker's containerd image store shows as ``DriverStatus``'s ``driver-type``
    being containerd's snapshotter (its ``Driver`` is the snapshotter, e.g. ``overlayfs``).
    """
    status = {
        str(row[0]): str(row[1])
        for row in info.get("DriverStatus") or ()
        if isinstance(row, (list, tuple)) and len(row) == 2
    }
    store = "containerd" if status.get("driver-type") == CONTAINERD_SNAPSHOTTER else "classic"
    components = [c for c in version.get("Components") or () if isinstance(c, dict) and c.get("Name")]
    name = str(components[0]["Name"]) if components else "Engine"  # Docker says "Engine", Podman "Podman Engine"
    return BuildEngine(
        name="Docker Engine" if name == "Engine" else name,
        version=str(version.get("Version") or ""),
        api_version=str(version.get("ApiVersion") or ""),
        storage_driver=str(info.get("Driver") or ""),
        image_store=store,
        platform=f"{version.get('Os') or ''}/{version.get('Arch') or ''}",
        endpoint=endpoint,
    )
