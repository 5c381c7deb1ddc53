"""The GPUs a recipe may name by name alone: compute capability, vLLM's family, and the host
platforms they come in. A GPU not listed here is accepted when the recipe gives all three
(``hardware.compute_capability``, ``capability_family``, ``platforms``).

``none`` is a host without a GPU: vLLM's CPU platform serves (the CI's real server). Its
capability ``0.0`` (family 0) is how the geometry gate names that platform
(geometry/kv/backends.py ``CPU_FAMILY``); a compose file for it reserves no GPU."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class GpuModel:
    name: str
    compute_capability: str  # MAJOR.MINOR, as torch.cuda.get_device_capability() gives it
    platforms: tuple[str, ...]  # the hosts it is sold in
    # The max_num_batched_tokens `vllm serve` picks on it (vLLM's EngineArgs.get_batch_defaults, by the
    # GPU's memory: 16,384 from 160 GiB, 8,192 from 70 GiB but on A100 and GB10, else 2,048; on the CPU
    # platform 2,048 per rank, what serve_batched_tokens gives for "none").
    serve_batched_tokens: int

    @property
    def capability_family(self) -> int:
        """vLLM's capability family: the major version x 10 (``is_device_capability_family``)."""
        return int(self.compute_capability.split(".")[0]) * 10


ARM64, AMD64 = "linux/arm64", "linux/amd64"
KNOWN_GPUS = tuple(
    GpuModel(*row)
    for row in (
        ("H100", "9.0", (AMD64,), 8192),  # 80-94 GB
        ("H200", "9.0", (AMD64,), 8192),  # 141 GB
        ("GH200", "9.0", (ARM64,), 8192),  # 96-144 GB
        ("B200", "10.0", (AMD64,), 16384),  # 180 GB
        ("GB200", "10.0", (ARM64,), 16384),  # 186 GB
        ("B300", "10.3", (AMD64,), 16384),  # 288 GB
        ("GB300", "10.3", (ARM64,), 16384),  # 288 GB
        ("RTX PRO 6000 Blackwell", "12.0", (AMD64,), 8192),  # 96 GB
        ("RTX 5090", "12.0", (AMD64,), 2048),  # 32 GB
        ("GB10", "12.1", (ARM64,), 2048),  # 128 GB unified, kept on the small tier
        ("none", "0.0", (AMD64, ARM64), 2048),
    )
)
NO_GPU = KNOWN_GPUS[-1]


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def known_gpu(name: str) -> Optional[GpuModel]:
    """The table's entry for ``name`` (case, spaces and dashes ignored: ``gb300``, ``RTX-5090``)."""
    return next((gpu for gpu in KNOWN_GPUS if _key(gpu.name) == _key(name)), None)


def serve_batched_tokens(name: str, tensor_parallel_size: int) -> Optional[int]:
    """What `vllm serve` takes for max_num_batched_tokens on ``name`` when no flag says (None: a GPU not
    in the table, whose memory is not known here)."""
    gpu = known_gpu(name)
    if gpu is None:
        return None
    return gpu.serve_batched_tokens * (tensor_parallel_size if gpu is NO_GPU else 1)


def has_gpu(name: str) -> bool:
    """Whether ``hardware.gpu`` names a GPU (``none``: a host without one)."""
    return known_gpu(name) is not NO_GPU


def tag_field(name: str) -> str:
    """The ``{gpu}`` tag field: lowercase, runs of other characters as one dash (``rtx-pro-6000-blackwell``)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
