"""What ``build.py --version`` reports: this project's version, the checkout's commit, and the
vLLM release the geometry gate models."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from geometry import DEFAULT_VERSION
from stackbuild.core.naming import checkout_label

DISTRIBUTION = "glm53-dflash2-images"


@dataclass(frozen=True)
class Versions:
    project: str
    commit: str
    vllm_modelled: str

    def text(self) -> str:
        return f"{DISTRIBUTION} {self.project} (commit {self.commit}; models vLLM {self.vllm_modelled})"

    def to_json(self) -> dict:
        return {"project": self.project, "commit": self.commit, "vllm_modelled": self.vllm_modelled}


def versions() -> Versions:
    try:
        project = version(DISTRIBUTION)
    except PackageNotFoundError:
        project = "not installed"
    return Versions(project, checkout_label(), DEFAULT_VERSION)
