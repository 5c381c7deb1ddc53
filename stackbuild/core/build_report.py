"""The build report's contract: where it is kept, its schema version, the engine section, and reading it back.

The build writes it (:mod:`stackbuild.image.report`); the compose and Kubernetes
generators read it back (the pushed digest and owner). Schema 2 records the
engine as :class:`BuildEngine` (schema 1 had a one-line string) and the pushed
image's config digest as the registry names it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from stackbuild.core.recipe import REPO_ROOT

DEFAULT_REPORT = REPO_ROOT / "out" / "build-report.json"
REPORT_SCHEMA = 2


@dataclass(frozen=True)
class BuildEngine:
    """The container engine a build ran on, as it describes itself (``docker version`` / ``docker info``)."""

    name: str  # "Docker Engine"
    version: str  # the server's version ("20.10.24", "29.0.1")
    api_version: str  # the API version spoken ("1.41")
    storage_driver: str  # "overlay2"; "overlayfs" under the containerd image store
    image_store: str  # "containerd" when images live in containerd's content store, else "classic"
    platform: str  # the engine's own os/architecture
    endpoint: str  # where it answers (DOCKER_HOST or the default socket)

    @property
    def line(self) -> str:
        """One line for logs and the provenance's builder id."""
        return (
            f"{self.name} {self.version} (API {self.api_version}, {self.storage_driver}, {self.image_store} image "
            f"store, {self.platform}) at {self.endpoint}"
        )

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "BuildEngine":
        return cls(**{key: str(data.get(key) or "") for key in cls.__dataclass_fields__})


def read_report(path: Optional[Path] = None) -> Optional[dict]:
    path = Path(path) if path else DEFAULT_REPORT
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def report_engine(report: Mapping[str, Any]) -> Optional[BuildEngine]:
    """The engine section of a report of this schema; None for an older report (its engine was a string)."""
    section = report.get("engine")
    if report.get("schema") != REPORT_SCHEMA or not isinstance(section, Mapping):
        return None
    return BuildEngine.from_json(section)
