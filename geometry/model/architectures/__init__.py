"""The modelled target architectures, one module each (stdlib only).

Adding one: a module here with its ``ARCHITECTURE`` entry (config checks, layer map), its
twin in ``geometry/oracle/architectures/`` (the same layers from vLLM's own classes), both
listed below, and a test that the simulator and vLLM agree on it."""

from __future__ import annotations

from geometry.model.architecture import Architecture
from geometry.model.architectures.glm5next import ARCHITECTURE as GLM5NEXT
from geometry.model.architectures.kimi_linear import ARCHITECTURE as KIMI_LINEAR
from geometry.model.architectures.qwen3 import ARCHITECTURE as QWEN3
from geometry.model.architectures.qwen3_moe import ARCHITECTURE as QWEN3_MOE
from geometry.model.architectures.qwen3_next import ARCHITECTURE as QWEN3_NEXT

ARCHITECTURES: tuple[Architecture, ...] = (GLM5NEXT, QWEN3_NEXT, KIMI_LINEAR, QWEN3, QWEN3_MOE)
BY_HF_ARCHITECTURE = {a.hf_architecture: a for a in ARCHITECTURES}
BY_MODEL_TYPE = {t: a for a in ARCHITECTURES for t in a.model_types}
BY_KIND = {a.kind: a for a in ARCHITECTURES}
