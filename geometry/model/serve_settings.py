"""The serve settings that decide the KV geometry, as a deployment names them (stdlib only).

``ServeSettings`` is what the served flags of ``vllm serve`` say about the geometry (None: the flag is
not given) plus ``ServeDefaults``, what decides it where no flag says: the machines, the vLLM
release and behaviour, the KV budget and ``vllm serve``'s batch for the GPU. Both sides make one: the build
from a recipe's served flags (stackbuild/core/gate.py), the image's pre-flight from the flags
vLLM's parser reads in the argv at start (geometry/preflight/check.py).
``geometry.model.inputs.build_inputs`` turns it and the two configs into the gate input.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from geometry.image_contract import Behaviour


@dataclass(frozen=True, kw_only=True)
class ServeDefaults:
    """What decides the geometry where no serve flag says (each named as in GeometryInputs)."""

    nodes: int  # machines the tensor-parallel group spans
    capability_family: int  # the GPU's (vLLM's is_device_capability_family)
    # On vLLM's CPU platform: the serving CPU has AVX512-BF16 (geometry/model/serving_cpu.py)
    cpu_avx512_bf16: bool
    vllm_behaviour: Behaviour  # the vLLM the image runs
    kv_cache_memory_bytes: int  # the KV budget without --kv-cache-memory-bytes
    # Without --max-num-batched-tokens: `vllm serve`'s default for the GPU (None: not known,
    # SchedulerConfig's own applies).
    max_num_batched_tokens: Optional[int]
    vllm_version: str  # the vLLM release the image runs (geometry/vllm_versions.py)

    @classmethod
    def of(cls, inputs) -> "ServeDefaults":
        """The values a gate input (geometry.model.inputs.GeometryInputs) was judged with."""
        return cls(**{f.name: getattr(inputs, f.name) for f in fields(cls)})


@dataclass(frozen=True, kw_only=True)
class ServeSettings:
    """The geometry's serve flags as given (None: not given) and what applies without them."""

    tensor_parallel_size: int
    kv_cache_dtype: str
    # The --speculative-config's (no speculative config: no drafter, 0 tokens).
    drafter_kv_cache_dtype: Optional[str]
    num_speculative_tokens: int
    drafter_attention_backend: Optional[str]
    enable_prefix_caching: Optional[bool]
    mamba_cache_mode: Optional[str]
    block_size: Optional[int]
    max_model_len: Optional[int]
    max_num_seqs: Optional[int]
    max_num_batched_tokens: Optional[int]
    kv_cache_memory_bytes: Optional[int]
    defaults: ServeDefaults
