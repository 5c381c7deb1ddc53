"""What the oracle needs of one architecture to build it from vLLM's own classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class OracleArchitecture:
    # The transformers (or vLLM) config class vLLM's model code is written against.
    hf_config_class: Callable[[], type]
    # (hf config, architecture name, torch dtype, max_model_len) -> the model config stand-in.
    model_config: Callable[..., Any]
    # (inputs, vllm config, hf config, forward context, num_spec): the target's layers, in vLLM's order.
    register_layers: Callable[..., None]
    # The architecture's own ``verify_and_update_config`` hook (None: it has none).
    verify: Callable[[Any], None] | None = None
