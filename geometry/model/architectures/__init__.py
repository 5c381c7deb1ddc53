"""The modelled target architectures: ``NAMES`` below is their one list (stdlib only).

Each name is a module here and its twin in ``geometry/oracle/architectures/``, and the entry's
``kind`` (the reports' ``model_kind``):

* ``geometry/model/architectures/<name>.py``: its ``ARCHITECTURE`` entry (how vLLM finds it,
  its config checks, its layer map), what the simulator plans;
* ``geometry/oracle/architectures/<name>.py``: its ``ORACLE`` entry (the same layers from
  vLLM's own classes), what the oracle runs; that registry is derived from this list.

Adding one is those two modules, its name below and its tests (geometry/README.md)."""

from __future__ import annotations

import importlib

from geometry.model.architecture import Architecture

# The modelled target architectures, in the order refusals list them.
NAMES = ("glm5next", "qwen3_next", "kimi_linear", "qwen3", "qwen3_moe")


def _entry(name: str) -> Architecture:
    """The ``ARCHITECTURE`` of the module ``name``, whose ``kind`` must be its module's name."""
    architecture = importlib.import_module(f"{__name__}.{name}").ARCHITECTURE
    if architecture.kind != name:
        raise ImportError(f"{__name__}.{name}: ARCHITECTURE.kind is {architecture.kind!r}, not its module's name")
    return architecture


ARCHITECTURES: tuple[Architecture, ...] = tuple(_entry(name) for name in NAMES)
BY_HF_ARCHITECTURE = {a.hf_architecture: a for a in ARCHITECTURES}
BY_MODEL_TYPE = {t: a for a in ARCHITECTURES for t in a.model_types}
BY_KIND = {a.kind: a for a in ARCHITECTURES}
