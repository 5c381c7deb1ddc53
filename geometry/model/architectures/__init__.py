"""The modelled target architectures: ``ARCHITECTURES`` below is their one list (stdlib only).

Each is a module here and its twin of the same name in ``geometry/oracle/architectures/``, and the
entry's ``kind`` (the reports' ``model_kind``) is that name:

* ``geometry/model/architectures/<name>.py``: its ``ARCHITECTURE`` entry (how vLLM finds it,
  its config checks, its layer map), what the simulator plans;
* ``geometry/oracle/architectures/<name>.py``: its ``ORACLE`` entry (the same layers from
  vLLM's own classes), what the oracle runs.

Both registries import their modules by name in the source (not by string), so what ships in the
image and what the oracle record's key hashes (``geometry.oracle.import_closure``) include them.
Adding one is those two modules, a line in each registry and its tests (geometry/README.md)."""

from __future__ import annotations

from geometry.model.architecture import Architecture
from geometry.model.architectures import glm5next, kimi_linear, qwen3, qwen3_moe, qwen3_next

# The modelled target architectures, in the order refusals list them.
ARCHITECTURES: tuple[Architecture, ...] = (
    glm5next.ARCHITECTURE,
    qwen3_next.ARCHITECTURE,
    kimi_linear.ARCHITECTURE,
    qwen3.ARCHITECTURE,
    qwen3_moe.ARCHITECTURE,
)
NAMES = tuple(a.kind for a in ARCHITECTURES)
BY_HF_ARCHITECTURE = {a.hf_architecture: a for a in ARCHITECTURES}
BY_MODEL_TYPE = {t: a for a in ARCHITECTURES for t in a.model_types}
BY_KIND = {a.kind: a for a in ARCHITECTURES}
