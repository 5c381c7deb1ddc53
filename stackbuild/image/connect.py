"""Connecting to the Docker engine: the one at ``DOCKER_HOST`` or the default socket."""

from __future__ import annotations

import os
import re

import docker
import docker.errors
import requests

from stackbuild.core.engines import check_supported
from stackbuild.core.errors import EngineUnavailable
from stackbuild.image.engine import DEFAULT_SOCKET, DockerEngine

# How long to wait for the daemon to answer a plain request (streams have no limit).
CONNECT_TIMEOUT = 15
REQUEST_TIMEOUT = int(os.environ.get("STACKBUILD_DOCKER_TIMEOUT", "600"))


def connect() -> DockerEngine:
    """The engine at DOCKER_HOST or the default socket; EngineUnavailable if none answers, EngineTooOld if it
    is older than the oldest supported. The client speaks the engine's own API version (docker-py asks it):
    a client pinned to an old one is refused by engines that dropped it (Docker 29: below 1.44)."""
    endpoint = os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    where = endpoint if os.environ.get("DOCKER_HOST") else f"the default socket ({DEFAULT_SOCKET})"
    try:
        client = docker.from_env(timeout=CONNECT_TIMEOUT)
        client.api.ping()
        version = client.api.version(api_version=False)
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        reason = re.sub(r"\s+", " ", reason)[:300]
        raise EngineUnavailable(
            f"no Docker engine answers at {where}: {reason}; start the Docker engine "
            "(e.g. `sudo systemctl start docker`; none installed: https://docs.docker.com/engine/install/) "
            "or set DOCKER_HOST"
        ) from None
    check_supported(str(version.get("Version") or ""), str(version.get("ApiVersion") or ""), where)
    client.api.timeout = REQUEST_TIMEOUT
    return DockerEngine(client, endpoint)
