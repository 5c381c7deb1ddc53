"""The Docker engine: :class:`DockerEngine`, the implementation of :class:`ContainerEngine`.

Everything the driver asks of a container engine is a method of the
interface in :mod:`stackbuild.image.engine_api`: say what it is, resolve a
base digest, pull, build from a context directory, inspect, tag, push, read
a file back from an image, run a command in it. :class:`DockerEngine` speaks the engine
API through docker-py (classic builder), connecting the standard way
(``DOCKER_HOST`` or the default socket), and turns the API's inspect data
into :class:`ImageInfo` values. Another backend would be another class
implementing the same interface.

Credentials are never ours: pulls and pushes send what ``docker login``
stored in the standard Docker config (``DOCKER_CONFIG`` or ``~/.docker``),
which docker-py reads itself.

Errors inside the JSON streams (``error`` / ``errorDetail`` with HTTP 200)
are detected here and turned into the driver's exceptions; registry errors
are classified as authentication refused, final (denied, unknown) or
transient (retried with backoff by the caller's policy, see
:func:`registry_retry`).
"""

from __future__ import annotations

import io
import ipaddress
import os
import re
import tarfile
from contextlib import contextmanager
from types import MappingProxyType
from typing import Iterator, Optional

import docker
import docker.errors
import requests
import tenacity

from geometry import one_line
from stackbuild.core.build_report import BuildEngine
from stackbuild.core.errors import (
    EngineError,
    EngineUnavailable,
    LockError,
    PullError,
    PushError,
    RegistryAuthError,
    RegistryUnavailable,
    StackBuildError,
)
from stackbuild.core.reference import DOCKER_HUB, ImageReference
from stackbuild.image.engine_api import BuildOutcome, Event, EventSink, ImageInfo, run_settings

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
# How long to wait for the daemon to answer a plain request (streams have no limit).
CONNECT_TIMEOUT = 15
REQUEST_TIMEOUT = int(os.environ.get("STACKBUILD_DOCKER_TIMEOUT", "600"))

MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)

# What a registry error says, and what it means for a retry.
_AUTH_PATTERNS = re.compile(
    r"unauthorized|authentication required|no basic auth credentials|incorrect username or password"
    r"|401 unauthorized|invalid username/password",
    re.I,
)
_FINAL_PATTERNS = re.compile(
    r"denied|forbidden|manifest unknown|name unknown|blob unknown|not found|does not exist"
    r"|invalid reference|manifest invalid|unsupported|does not match the specified platform"
    r"|server gave HTTP response to HTTPS client",
    re.I,
)
# Nobody answers at that address (refused, or the name does not resolve): asking again
# in a few seconds gets the same answer, so it is reported at once.
_UNREACHABLE_PATTERNS = re.compile(
    r"connection refused|no such host|name or service not known|nodename nor servname|failed to resolve"
    r"|temporary failure in name resolution|name resolution|server misbehaving|getaddrinfo|could not resolve",
    re.I,
)
_TRANSIENT_PATTERNS = re.compile(
    r"connection reset|broken pipe|no route to host|i/o timeout|timeout|timed out"
    r"|\bEOF\b|temporary failure|try again|too many requests|toomanyrequests|\b429\b|\b50[0234]\b"
    r"|service unavailable|bad gateway|internal server error|dial tcp|network is unreachable",
    re.I,
)


@contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """Turn the engine vanishing or refusing mid-run into one-line errors, not tracebacks."""
    try:
        yield
    except StackBuildError:
        raise
    except requests.exceptions.ConnectionError as exc:
        raise EngineUnavailable(f"{what}: the Docker engine stopped answering ({one_line(exc)[:400]})") from None
    except docker.errors.APIError as exc:
        raise EngineError(f"{what}: the Docker engine refused: {one_line(_api_error_text(exc))[:400]}") from None
    except docker.errors.DockerException as exc:
        raise EngineError(f"{what}: {one_line(exc)[:400]}") from None


class RegistryTransient(StackBuildError):
    """A registry error worth retrying (network, 5xx, 429); becomes RegistryUnavailable."""

    def __init__(self, what: str, reason: str):
        super().__init__(f"{what}: {reason}")
        self.reason = reason


def unreachable(text: str) -> bool:
    """Whether an error says nobody answers at the registry's address
    (a refused connection, a name that does not resolve)."""
    return bool(_UNREACHABLE_PATTERNS.search(text))


def classify_registry_error(what: str, message: str, registry: str = "", final: type = PushError) -> StackBuildError:
    """Map a registry error message to the exception the caller raises (or retries).

    ``final`` is the class of what cannot succeed (PushError for a push,
    PullError for a pull, LockError for a digest look-up).
    """
    text = message.strip()
    if unreachable(text):
        return RegistryUnavailable(f"{what}: registry unreachable (not retried): {text}")
    if _AUTH_PATTERNS.search(text):
        login = f"docker login {registry}" if registry and registry != DOCKER_HUB else "docker login"
        return RegistryAuthError(
            f"{what}: the registry refused the credentials from the Docker config ({text}); run `{login}`"
        )
    if _FINAL_PATTERNS.search(text):
        return final(f"{what}: {text}")
    if _TRANSIENT_PATTERNS.search(text):
        return RegistryTransient(what, text)
    return final(f"{what}: {text}")


def registry_retry(
    what: str, on_retry: Optional[EventSink] = None, deadline: Optional[float] = None
) -> tenacity.Retrying:
    """Backoff for transient registry errors; everything else is raised at once.

    ``STACKBUILD_REGISTRY_ATTEMPTS`` (default 5) and ``STACKBUILD_REGISTRY_BACKOFF``
    (first wait in seconds, default 2, doubling up to 30) tune it. With a
    ``deadline`` (seconds), no wait is started that would end after it.
    """
    attempts = max(1, int(os.environ.get("STACKBUILD_REGISTRY_ATTEMPTS", "5")))
    first = float(os.environ.get("STACKBUILD_REGISTRY_BACKOFF", "2"))
    stop = tenacity.stop_after_attempt(attempts)
    if deadline is not None:
        stop = stop | tenacity.stop_before_delay(deadline)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_retry is not None:
            exc = state.outcome.exception() if state.outcome else None
            on_retry(
                {
                    "event": "retry",
                    "what": what,
                    "attempt": state.attempt_number,
                    "of": attempts,
                    "wait_seconds": round(state.next_action.sleep if state.next_action else 0, 1),
                    "error": str(getattr(exc, "reason", exc)),
                }
            )

    def give_up(state: tenacity.RetryCallState):
        exc = state.outcome.exception() if state.outcome else None
        reason = getattr(exc, "reason", exc)
        raise RegistryUnavailable(f"{what}: registry unavailable after {state.attempt_number} attempts: {reason}")

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(RegistryTransient),
        stop=stop,
        wait=tenacity.wait_exponential(multiplier=first, min=first, max=30),
        before_sleep=before_sleep,
        retry_error_callback=give_up,
        reraise=True,
    )


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
        platforms: tuple[str, ...],
        *,
        deadline: Optional[float] = None,
        on_retry: Optional[EventSink] = None,
    ) -> tuple[str, tuple[str, ...]]:
        """What ``reference`` points to in its registry, and the platforms it offers.

        Asked through the daemon (distribution inspect), so the standard
        credentials apply; with a ``deadline`` (seconds) each request and the
        retries together end within it. Raises LockError when one of
        ``platforms`` is not offered.
        """
        what = f"{reference}: distribution inspect"
        registry = reference.registry

        def ask() -> dict:
            try:
                return self.api.inspect_distribution(str(reference))
            except docker.errors.APIError as exc:
                raise classify_registry_error(what, _api_error_text(exc), registry, LockError) from None
            except requests.exceptions.Timeout:
                raise RegistryUnavailable(
                    f"{what}: no answer from the registry within {deadline:g} s (the engine asks it)"
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
        plain = {"/".join(o.split("/")[:2]) for o in offered}
        for platform in platforms:
            if platform not in offered and platform not in plain:
                raise LockError(
                    f"{reference}: the registry offers {', '.join(sorted(offered)) or 'no platform'}, not {platform}"
                )
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
                raise classify_registry_error(what, _api_error_text(exc), registry, PullError) from None

        registry_retry(what, on_retry)(attempt)
        pulled = self.inspect_image(str(local))
        if pulled is None:
            raise PullError(f"{what}: the engine reported success but the image is not there")
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
                raise classify_registry_error(what, _api_error_text(exc), registry) from None
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


def _api_error_text(exc: docker.errors.APIError) -> str:
    explanation = exc.explanation
    if isinstance(explanation, bytes):
        explanation = explanation.decode("utf-8", "replace")
    return str(explanation or exc)


def connect() -> DockerEngine:
    """The engine at DOCKER_HOST or the default socket; EngineUnavailable if none answers."""
    endpoint = os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    where = endpoint if os.environ.get("DOCKER_HOST") else f"the default socket ({DEFAULT_SOCKET})"
    try:
        client = docker.from_env(timeout=CONNECT_TIMEOUT)
        client.api.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = re.sub(r"\s+", " ", reason)[:300]
        raise EngineUnavailable(
            f"no Docker engine answers at {where}: {reason}; start the Docker engine "
            "(e.g. `sudo systemctl start docker`; none installed: https://docs.docker.com/engine/install/) "
            "or set DOCKER_HOST"
        ) from None
    client.api.timeout = REQUEST_TIMEOUT
    return DockerEngine(client, endpoint)
