"""vLLM's own code for each modelled architecture, by the simulator's kind: the twin of
each entry of geometry/model/architectures/ (the oracle runs vLLM; the simulator cannot import it)."""

from __future__ import annotations

from geometry.oracle.architecture import OracleArchitecture
from geometry.oracle.architectures.glm5next import ORACLE as GLM5NEXT
from geometry.oracle.architectures.kimi_linear import ORACLE as KIMI_LINEAR
from geometry.oracle.architectures.qwen3 import ORACLE as QWEN3
from geometry.oracle.architectures.qwen3_moe import ORACLE as QWEN3_MOE
from geometry.oracle.architectures.qwen3_next import ORACLE as QWEN3_NEXT

ORACLE_ARCHITECTURES: dict[str, OracleArchitecture] = {
    "glm5next": GLM5NEXT,
    "qwen3_next": QWEN3_NEXT,
    "kimi_linear": KIMI_LINEAR,
    "qwen3": QWEN3,
    "qwen3_moe": QWEN3_MOE,
}
