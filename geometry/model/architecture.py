"""What the simulator knows of one target architecture: how vLLM finds it
(``architectures``, ``model_type``), the checks its ``config.json`` gets, and
how the config maps to the layers vLLM registers (stdlib only).

Each modelled architecture is one entry, in ``geometry/model/architectures/`` (its
twin for vLLM's own code, which the oracle runs, is in
``geometry/oracle/architectures/``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from geometry.model.config_reader import ConfigReader
from geometry.model.parts import Target, TargetSettings


def _no_sparse_mla(text: Mapping[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class Architecture:
    kind: str  # the simulator's name for it (reports' model_kind)
    hf_architecture: str  # the ``architectures[0]`` vLLM's registry runs it by
    model_types: tuple[str, ...]  # the text config's ``model_type`` without ``architectures``
    layer_types: tuple[str, ...]  # the values its ``layer_types`` may hold
    hybrid: bool  # attention + mamba state: hybrid alignment, mamba_cache_mode
    # The architecture's own config checks (ConfigInvalid naming the key), given the
    # text config's reader and num_hidden_layers.
    check: Callable[[ConfigReader, int], None]
    build_target: Callable[[TargetSettings], Target]
    # Whether its attention runs vLLM's sparse MLA (the cache dtype the layers run may change).
    runs_sparse_mla: Callable[[Mapping[str, Any]], bool] = _no_sparse_mla
    # ``get_mamba_prefill_checkpoint_alignment`` in "align" mode: the LCM of its mamba layers'
    # ``get_prefill_checkpoint_alignment`` (KDA layers export none: ``MambaBase``'s None).
    prefill_checkpoint_alignment: int | None = None
    # Why mamba_cache_mode "align" is not modelled for it (None: it is).
    align_mode_not_modelled: str | None = None
    # Whether vLLM's CPU platform (CPU_FAMILY) is modelled for it: its attention runs CPU_ATTN and
    # its layers' modules import on vLLM's CPU build (KDA and MLA targets do not start there).
    runs_on_cpu: bool = False
