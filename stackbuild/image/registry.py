"""Read and write manifests and blobs in an OCI registry through oras's Python SDK.

The driver asks the registry itself (not the engine) what a tag points to,
before it pushes, and reads back what a push put there. Credentials are the ones ``docker login`` stored in the
standard Docker config (``DOCKER_CONFIG`` or ``~/.docker``), handed to oras,
which reads inline auths, credential helpers and credential stores from it.
Loopback registries and the engine's insecure registries are spoken to over
plain http. Transient errors are retried by :func:`engine.registry_retry`,
not by oras's own loop; a refused connection or a name that does not
resolve is reported at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from types import MappingProxyType
from typing import Optional

import docker.utils.config
import oras.auth
import oras.container
import oras.provider
import requests

from geometry import one_line
from stackbuild.core.errors import PushError, RegistryAuthError, RegistryUnavailable
from stackbuild.core.reference import ImageReference
from stackbuild.image.engine_api import ContainerEngine, EventSink, ImageInfo, run_settings
from stackbuild.image.progress import Progress
from stackbuild.image.registry_errors import RegistryTransient, classify_registry_error, registry_retry, unreachable

MANIFEST_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")


@dataclass(frozen=True)
class RemoteImage:
    """What a tag names in the registry for one platform: the tag's manifest, the platform's manifest, its config."""

    reference: str  # repository:tag as asked
    manifest_digest: str  # what the tag points to (an index's digest when it is an index)
    image_digest: (
        str  # the platform's image config digest, as its manifest names it; "" if the index lacks the platform
    )
    platform_manifest: str  # the platform's image manifest: manifest_digest itself, or the index's entry for it


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    size: int
    document: dict

    @property
    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


def image_info_of_config(digest: str, config: dict) -> ImageInfo:
    """An OCI image config document (``os``, ``architecture``, ``config``, ``rootfs.diff_ids``) as an
    :class:`ImageInfo` whose id is the config's digest."""
    settings = config.get("config") or {}
    layers = (config.get("rootfs") or {}).get("diff_ids") or ()
    return ImageInfo(
        id=digest,
        os=str(config.get("os") or ""),
        architecture=str(config.get("architecture") or ""),
        labels=MappingProxyType(dict(settings.get("Labels") or {})),
        layers=tuple(str(layer) for layer in layers),
        run=run_settings(settings),
    )


class _OrasRegistry(oras.provider.Registry):
    """oras's client without its retry loop: registry_retry decides what is worth retrying."""

    def do_request(self, *args, **kwargs) -> requests.Response:
        return oras.provider.Registry.do_request.__wrapped__(self, *args, **kwargs)


def _docker_config() -> dict:
    path = docker.utils.config.find_config_file()
    if not path:
        return {}
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def _connection_problem(exc: requests.exceptions.RequestException) -> str:
    """What went wrong in a few words: the OS error (``connection refused``) when there is one."""
    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
    if found:
        return found.group(1).strip().lower()
    return one_line(exc)[:300] or type(exc).__name__


class RegistryClient:
    """Manifests and blobs of one repository (``registry/name``) in its registry."""

    def __init__(self, repository: str, *, plain_http: bool, on_retry: Optional[EventSink] = None):
        self.repository = repository
        located = ImageReference(repository)
        self.registry, self.host, self.name = located.registry, located.api_host, located.remote_name
        self.plain_http = plain_http
        self.on_retry = on_retry
        self._client: Optional[_OrasRegistry] = None

    def _oras(self) -> _OrasRegistry:
        """The oras client, with the auth backend the registry's challenge asks for (basic or bearer)."""
        if self._client is None:
            scheme = "http" if self.plain_http else "https"
            challenge = requests.get(f"{scheme}://{self.host}/v2/", timeout=30).headers.get("WWW-Authenticate", "")
            backend = "basic" if challenge.lower().startswith("basic") else "token"
            client = _OrasRegistry(hostname=self.host, insecure=self.plain_http, auth_backend=backend)
            # Never empty: oras would then read ~/.docker/config.json whatever DOCKER_CONFIG says.
            client.auth._auth_config = _docker_config() or {"auths": {}}
            self._client = client
        return self._client

    def _container(self, reference: str) -> oras.container.Container:
        return oras.container.Container(str(ImageReference.at(f"{self.host}/{self.name}", reference)))

    def _call(self, what: str, send) -> requests.Response:
        """One registry exchange through oras, with our errors; 401/403 are refused credentials."""
        try:
            client = self._oras()
            client.auth.load_configs(self._container("latest"))
            if isinstance(client.auth, oras.auth.BasicAuth) and not getattr(client.auth, "_basic_auth", None):
                raise RegistryAuthError(
                    f"{what}: no basic auth credentials for {self.registry} in the Docker config; "
                    f"run `docker login {self.registry}`"
                )
            response = send(client)
        except requests.exceptions.SSLError as exc:
            raise PushError(
                f"{what}: TLS failed ({exc.__class__.__name__}); is {self.registry} an insecure registry of the engine?"
            ) from None
        except requests.exceptions.RequestException as exc:
            problem = f"{self.host}: {_connection_problem(exc)}"
            if unreachable(problem):
                raise RegistryUnavailable(f"{what}: registry unreachable (not retried): {problem}") from None
            raise RegistryTransient(what, problem) from None
        except ValueError as exc:
            if "authentication" in str(exc).lower():  # oras: the registry asked for an authentication it cannot answer
                raise RegistryAuthError(f"{what}: {exc}; run `docker login {self.registry}`") from None
            raise PushError(f"{what}: {' '.join(str(exc).split())[:300]}") from None
        if response.status_code in (401, 403):
            raise RegistryAuthError(
                f"{what}: the registry refused the credentials from the Docker config "
                f"(HTTP {response.status_code}); run `docker login {self.registry}`"
            )
        if response.status_code >= 400 and response.status_code != 404:
            raise classify_registry_error(
                what, f"HTTP {response.status_code} {response.reason} {response.text[:200]}", self.registry
            )
        return response

    def _retried(self, what: str, send) -> requests.Response:
        return registry_retry(what, self.on_retry)(self._call, what, send)

    def _what(self, reference: str, action: str) -> str:
        return f"{ImageReference.at(self.repository, reference)}: {action}"

    def manifest(self, reference: str) -> Optional[Manifest]:
        """The manifest (or index) a tag or digest names, retried on transient errors; None if unknown."""
        what = self._what(reference, "manifest GET")
        response = self._retried(
            what,
            lambda client: client.do_request(
                f"{client.prefix}://{self._container(reference).manifest_url()}",
                "GET",
                headers={"Accept": MANIFEST_ACCEPT},
            ),
        )
        if response.status_code == 404:
            return None
        digest = "sha256:" + hashlib.sha256(response.content).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise PushError(f"{what}: the registry sent a manifest whose sha256 is {digest}")
        try:
            document = response.json()
        except ValueError:
            raise PushError(f"{what}: the registry sent a manifest that is not JSON") from None
        media_type = document.get("mediaType") or response.headers.get("Content-Type", "").split(";")[0]
        return Manifest(digest, media_type, len(response.content), document)

    def blob(self, digest: str) -> Optional[bytes]:
        """A blob's bytes, checked against its digest; None if the registry does not have it."""
        what = self._what(digest, "blob GET")
        response = self._retried(what, lambda client: client.get_blob(self._container("latest"), digest))
        if response.status_code == 404:
            return None
        got = "sha256:" + hashlib.sha256(response.content).hexdigest()
        if got != digest:
            raise PushError(f"{what}: the registry sent a blob whose sha256 is {got}")
        return response.content

    def image_config(self, digest: str) -> Optional[ImageInfo]:
        """The image config blob ``digest`` names (its id is that digest); None if absent or not a JSON object."""
        raw = self.blob(digest)
        try:
            config = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return None
        if not isinstance(config, dict):
            return None
        return image_info_of_config(digest, config)

    def push_blob(self, data: bytes, media_type: str) -> dict:
        """Upload ``data`` (oras: skipped when the registry has it); return its OCI descriptor."""
        descriptor = {
            "mediaType": media_type,
            "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
            "size": len(data),
        }
        what = self._what(descriptor["digest"], "blob upload")
        with tempfile.TemporaryDirectory(prefix="stackbuild-blob-") as tmp:
            path = os.path.join(tmp, "blob")
            with open(path, "wb") as handle:
                handle.write(data)
            response = self._retried(
                what, lambda client: client.upload_blob(path, self._container("latest"), dict(descriptor))
            )
        if response.status_code not in (200, 201, 202):
            raise PushError(f"{what}: HTTP {response.status_code}")
        return descriptor

    def push_manifest(self, document: dict, reference: Optional[str] = None) -> tuple[dict, requests.Response]:
        """PUT a manifest or index (by its digest, or under the tag ``reference``);
        return its descriptor and the response."""
        data = json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        target = reference or digest
        what = self._what(target, "manifest PUT")
        response = self._retried(
            what,
            lambda client: client.do_request(
                f"{client.prefix}://{self._container(target).manifest_url()}",
                "PUT",
                headers={"Content-Type": document["mediaType"]},
                data=data,
            ),
        )
        if response.status_code not in (200, 201, 202):
            raise PushError(f"{what}: HTTP {response.status_code} {response.text[:200]}")
        return {"mediaType": document["mediaType"], "digest": digest, "size": len(data)}, response

    def referrers(self, digest: str) -> Optional[dict]:
        """The OCI 1.1 referrers index of ``digest``; None when the registry has no referrers API."""
        what = self._what(digest, "referrers GET")
        response = self._retried(
            what,
            lambda client: client.do_request(
                f"{client.prefix}://{self.host}/v2/{self.name}/referrers/{digest}",
                "GET",
                headers={"Accept": "application/vnd.oci.image.index.v1+json"},
            ),
        )
        if response.status_code == 404 or "json" not in response.headers.get("Content-Type", ""):
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def image(self, tag: str, platform: str) -> Optional[RemoteImage]:
        """What ``tag`` names for ``platform``; None when the tag does not exist."""
        found = self.manifest(tag)
        if found is None:
            return None
        digest, document = found.digest, found.document
        reference = str(ImageReference(self.repository, tag=tag))
        manifest = document
        if document.get("mediaType") in INDEX_TYPES or "manifests" in document:
            os_name, _, arch = platform.partition("/")
            entry = next(
                (
                    m
                    for m in document.get("manifests") or []
                    if (m.get("platform") or {}).get("os") == os_name
                    and (m.get("platform") or {}).get("architecture") == arch.split("/")[0]
                ),
                None,
            )
            if entry is None:  # an index without this platform: another image
                return RemoteImage(reference, digest, image_digest="", platform_manifest="")
            child = self.manifest(entry["digest"])
            if child is None:
                raise PushError(f"{reference}: the index names {entry['digest']}, which the registry does not have")
            manifest, platform_manifest = child.document, child.digest
        else:
            platform_manifest = digest
        config = (manifest.get("config") or {}).get("digest", "")
        return RemoteImage(reference, digest, image_digest=config, platform_manifest=platform_manifest)

    def image_content(self, remote: RemoteImage) -> Optional[ImageInfo]:
        """The config blob ``remote`` names for its platform; None when it names none or the registry lacks it."""
        return self.image_config(remote.image_digest) if remote.image_digest else None

    def holds(self, remote: RemoteImage, image: ImageInfo) -> bool:
        """Whether what ``remote`` names for its platform is ``image``, by the config blob the registry holds."""
        held = self.image_content(remote)
        return held is not None and image.same_content(held)


def registry_client(engine: ContainerEngine, repository: str, progress: Optional[Progress] = None) -> RegistryClient:
    """The registry of ``repository``, over plain http when the engine speaks it so (loopback, its insecure
    registries); retries are shown by ``progress``."""
    return RegistryClient(
        repository,
        plain_http=engine.plain_http(ImageReference(repository).registry),
        on_retry=progress.retry_event if progress else None,
    )
