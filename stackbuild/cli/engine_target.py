"""`compose --engine-api`: the Docker Engine API version a compose file is written for, and the check of the
engine it targets (the one at DOCKER_HOST or the default socket)."""

from __future__ import annotations

from typing import Optional

from stackbuild.core.engines import OLDEST, api_at_least, api_tuple
from stackbuild.core.errors import EngineTooOld, EngineUnavailable, UsageError
from stackbuild.image.connect import connect
from stackbuild.serve.writer import notice

AUTO = "auto"


def engine_api_for(value: Optional[str]) -> Optional[str]:
    """None (the oldest supported engine's form) when not given; ``auto``: the API of the engine that answers
    (none: exit 3; one too old: exit 32); a version: that one, checked against the engine when one answers."""
    if value is None:
        return None
    if value != AUTO:
        try:
            api_tuple(value)
        except ValueError:
            raise UsageError(f"--engine-api {value!r}: not an engine API version (e.g. 1.44) nor {AUTO}") from None
        if not api_at_least(value, OLDEST.api):
            raise UsageError(f"--engine-api {value}: older than the oldest supported engine, {OLDEST}")
    try:
        engine = connect()
    except EngineUnavailable as exc:
        if value == AUTO:
            raise
        notice(f"--engine-api {value}: not checked against an engine ({exc})")
        return value
    about = engine.about()
    if value == AUTO:
        return about.api_version
    if not api_at_least(about.api_version, value):
        raise EngineTooOld(
            f"--engine-api {value}: the Docker engine at {about.endpoint} is Docker {about.version} "
            f"(API {about.api_version}), older than the API the file would be written for"
        )
    return value
