"""vLLM's own code for each modelled architecture: the twin of each entry of
geometry/model/architectures/ (the oracle runs vLLM; the simulator cannot import it).

The twins are not listed here: the twin of the architecture ``kind`` is the module of that name
in this package (its ``ORACLE``), loaded on first use."""

from __future__ import annotations

import functools
import importlib

from geometry.model.architectures import NAMES
from geometry.oracle.architecture import OracleArchitecture


@functools.cache
def oracle_architecture(kind: str) -> OracleArchitecture:
    """The twin of the modelled architecture ``kind`` (KeyError for a kind not modelled)."""
    if kind not in NAMES:
        raise KeyError(kind)
    return importlib.import_module(f"{__name__}.{kind}").ORACLE
