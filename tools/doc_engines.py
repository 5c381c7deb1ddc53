"""README.md's supported-engines section, from stackbuild/core/engines.py."""

from __future__ import annotations

from stackbuild.core.engines import NEWEST_TESTED, OLDEST, START_INTERVAL_API


def supported_engines() -> str:
    return (
        f"Supported Docker engines: {OLDEST} is the oldest `build.py` runs on (an older one is refused in one "
        f"line, exit 32); {NEWEST_TESTED}, with the containerd image store, the newest tested. The test suite "
        "runs the main job on both (`tests/infra/engine28.sh` starts the second). Images are built by the "
        "engine's classic builder (the engine API's `POST /build`, not BuildKit) on both image stores. "
        f"`compose --engine-api` writes the health check's `start_interval` for API {START_INTERVAL_API} "
        "(Docker 25) and newer.\n"
    )
