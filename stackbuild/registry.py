"""Read manifests from an OCI registry through oras's Python SDK.

The driver asks the registry itself (not the engine) what a tag points to,
before it pushes. Credentials are the ones ``docker login`` stored in the
standard Docker config (``DOCKER_CONFIG`` or ``~/.docker``), handed to oras,
which reads inline auths, credential helpers and credential stores from it.
Loopback registries and the engine's insecure registries are spoken to over
plain http. Transient errors are retried by :func:`engine.registry_retry`,
not by oras's own loop.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Optional

import docker.utils.config
import oras.auth
import oras.container
import oras.provider
import requests

from .engine import MANIFEST_ACCEPT, EventSink, RegistryTransient, classify_registry_error, registry_of, registry_retry
from .errors import PushError, RegistryAuthError

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")


@dataclass(frozen=True)
class RemoteImage:
    """What a tag names in the registry: the manifest's digest and the image (config) digest for one platform."""

    reference: str        # repository:tag as asked
    manifest_digest: str  # what the tag points to (an index's digest when it is an index)
    image_digest: str     # the platform's image config digest: the local engine's image id for the same image


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
    return re.sub(r"\s+", " ", str(exc)).strip()[:300] or type(exc).__name__


class RegistryReader:
    """Manifests of one repository (``registry/name``) in its registry."""

    def __init__(self, repository: str, *, plain_http: bool, on_retry: Optional[EventSink] = None):
        self.repository = repository
        self.registry = registry_of(repository)
        self.host = "registry-1.docker.io" if self.registry == "docker.io" else self.registry
        self.name = repository.split("/", 1)[1] if self.registry != "docker.io" else repository
        if self.registry == "docker.io" and "/" not in self.name:
            self.name = f"library/{self.name}"
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

    def _get_manifest(self, reference: str, what: str) -> Optional[tuple[str, dict]]:
        """(digest, document) of ``name:reference``; None when the registry does not know it."""
        try:
            client = self._oras()
            container = oras.container.Container(f"{self.host}/{self.name}:{reference}" if not reference.startswith("sha256:")
                                                 else f"{self.host}/{self.name}@{reference}")
            client.auth.load_configs(container)
            if isinstance(client.auth, oras.auth.BasicAuth) and not getattr(client.auth, "_basic_auth", None):
                raise RegistryAuthError(f"{what}: no basic auth credentials for {self.registry} in the Docker config; "
                                        f"run `docker login {self.registry}`")
            url = f"{client.prefix}://{container.manifest_url()}"
            response = client.do_request(url, "GET", headers={"Accept": MANIFEST_ACCEPT})
        except requests.exceptions.SSLError as exc:
            raise PushError(f"{what}: TLS failed ({exc.__class__.__name__}); is {self.registry} an insecure registry of the engine?") from None
        except requests.exceptions.RequestException as exc:
            raise RegistryTransient(what, f"{self.host}: {_connection_problem(exc)}") from None
        except ValueError as exc:  # oras: the registry asked for an authentication it cannot answer
            raise RegistryAuthError(f"{what}: {exc}; run `docker login {self.registry}`") from None
        if response.status_code in (401, 403):
            raise RegistryAuthError(f"{what}: the registry refused the credentials from the Docker config "
                                    f"(HTTP {response.status_code}); run `docker login {self.registry}`")
        if response.status_code == 404:
            return None
        if response.status_code >= 400:
            raise classify_registry_error(what, f"HTTP {response.status_code} {response.reason}", self.registry)
        digest = "sha256:" + hashlib.sha256(response.content).hexdigest()
        try:
            document = response.json()
        except ValueError:
            raise PushError(f"{what}: the registry sent a manifest that is not JSON") from None
        return digest, document

    def manifest(self, reference: str) -> Optional[tuple[str, dict]]:
        """(digest, document) of a tag or digest, retried on transient errors; None if unknown."""
        what = f"{self.repository}:{reference}: manifest GET" if not reference.startswith("sha256:") \
            else f"{self.repository}@{reference}: manifest GET"
        return registry_retry(what, self.on_retry)(self._get_manifest, reference, what)

    def image(self, tag: str, platform: str) -> Optional[RemoteImage]:
        """What ``tag`` names for ``platform``; None when the tag does not exist."""
        found = self.manifest(tag)
        if found is None:
            return None
        digest, document = found
        reference = f"{self.repository}:{tag}"
        manifest = document
        if document.get("mediaType") in INDEX_TYPES or "manifests" in document:
            os_name, _, arch = platform.partition("/")
            entry = next((m for m in document.get("manifests") or []
                          if (m.get("platform") or {}).get("os") == os_name
                          and (m.get("platform") or {}).get("architecture") == arch.split("/")[0]), None)
            if entry is None:
                return RemoteImage(reference, digest, "")  # an index without this platform: another image
            child = self.manifest(entry["digest"])
            if child is None:
                raise PushError(f"{reference}: the index names {entry['digest']}, which the registry does not have")
            manifest = child[1]
        config = (manifest.get("config") or {}).get("digest", "")
        return RemoteImage(reference, digest, config)
