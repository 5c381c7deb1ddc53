"""The Docker engines this project supports: the oldest it runs on, the newest it is tested on, and what
an engine's API version allows.

An engine is judged by its API version (``GET /version``'s ``ApiVersion``), the number the engine and
its clients agree on, not by its release number (a distribution's ``20.10.24+dfsg1``). The test suite
runs the main job on both ends (tests/infra: Debian 12's docker.io and Debian unstable's Docker 28.5
with the containerd image store); README.md names them from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stackbuild.core.errors import EngineTooOld


@dataclass(frozen=True)
class EngineRelease:
    """A Docker Engine release and the API version it speaks at most."""

    version: str
    api: str

    def __str__(self) -> str:
        return f"Docker {self.version} (API {self.api})"


OLDEST = EngineRelease("20.10", "1.41")  # Debian 12's docker.io
NEWEST_TESTED = EngineRelease("28.5", "1.51")  # Debian unstable's docker.io, the containerd image store on
# The first API whose healthcheck takes start_interval (Docker 25); Compose refuses the key below it.
START_INTERVAL_API = "1.44"

_API_RE = re.compile(r"^(\d+)\.(\d+)$")


def api_tuple(api: str) -> tuple[int, int]:
    """``"1.44"`` -> ``(1, 44)``; ValueError for anything else."""
    match = _API_RE.match(str(api).strip())
    if match is None:
        raise ValueError(f"not an engine API version: {api!r}")
    return int(match.group(1)), int(match.group(2))


def api_at_least(api: str, floor: str) -> bool:
    return api_tuple(api) >= api_tuple(floor)


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text)[:200]


def check_supported(version: str, api: str, where: str) -> None:
    """Refuse an engine older than OLDEST (one line naming it, the oldest and the newest tested)."""
    try:
        supported = api_at_least(api, OLDEST.api)
    except ValueError:
        supported = False
    if not supported:
        said = _one_line(f"Docker {version or 'of no version'} (API {api or 'not given'})")
        raise EngineTooOld(
            f"the Docker engine at {where} is {said}: the oldest supported is {OLDEST}, the newest tested "
            f"{NEWEST_TESTED}; upgrade the engine (https://docs.docker.com/engine/install/) or set DOCKER_HOST"
        )
