"""vLLM's own code for each modelled architecture: the twin of each entry of
geometry/model/architectures/ (the oracle runs vLLM; the simulator cannot import it). Each twin is
the module named by its architecture's ``kind``; tests/unit/geometry/model/test_architectures.py
holds the two registries to the same names. Importing a twin imports no vLLM: its functions do."""

from __future__ import annotations

from geometry.oracle.architecture import OracleArchitecture
from geometry.oracle.architectures import glm5next, kimi_linear, qwen3, qwen3_moe, qwen3_next

ORACLE_ARCHITECTURES: dict[str, OracleArchitecture] = {
    module.__name__.rsplit(".", 1)[1]: module.ORACLE for module in (glm5next, qwen3_next, kimi_linear, qwen3, qwen3_moe)
}


def oracle_architecture(kind: str) -> OracleArchitecture:
    """The twin of the modelled architecture ``kind`` (KeyError for a kind not modelled)."""
    return ORACLE_ARCHITECTURES[kind]
