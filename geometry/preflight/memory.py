"""The KV-cache budget a container start will get, from its flags and its GPU (stdlib only).

In order: ``--kv-cache-memory-bytes`` when the argv gives it; otherwise
``--gpu-memory-utilization`` x the visible GPU's memory (``nvidia-smi``, never torch; the
smallest when several are visible, as the pool is the minimum over ranks) minus the
weights per rank (the tensor bytes the safetensors headers list, over the
tensor-parallel size) minus an activation reserve, which is an estimate (vLLM measures
its own peak when it profiles); with no GPU visible, the recipe's figure, which the build
checked. ``Budget.source`` says which one in words.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Optional

GIB = 2**30
MIB = 2**20
# An estimate of what vLLM keeps beside the weights and the KV cache on each rank at start
# (activations of the profiling run, CUDA graphs, the sampler): stated, never measured here.
ACTIVATION_RESERVE_BYTES = 4 * GIB
NVIDIA_SMI = ("nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits")
NVIDIA_SMI_TIMEOUT_S = 10


@dataclass(frozen=True)
class GpuMemory:
    total_bytes: Optional[int]  # None: no GPU answered
    why_not: str = ""  # when None: why (in words)


@dataclass(frozen=True)
class Budget:
    kv_cache_memory_bytes: int  # may be <= 0: nothing is left for the KV cache
    source: str  # how it was found, for the outcome's line
    from_recipe: bool = False  # the recipe's own figure (what the build checked)


def gpu_memory() -> GpuMemory:
    """The smallest visible GPU's memory, as ``nvidia-smi`` reports it (MiB)."""
    try:
        run = subprocess.run(NVIDIA_SMI, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except FileNotFoundError:
        return GpuMemory(None, "no nvidia-smi on PATH")
    except subprocess.TimeoutExpired:
        return GpuMemory(None, f"nvidia-smi did not answer in {NVIDIA_SMI_TIMEOUT_S} s")
    except OSError as exc:
        return GpuMemory(None, f"nvidia-smi cannot run: {exc.strerror}")
    if run.returncode != 0:
        first = (run.stderr or run.stdout).strip().splitlines()
        return GpuMemory(None, f"nvidia-smi exited {run.returncode}" + (f" ({first[0][:120]})" if first else ""))
    values = []
    for line in run.stdout.split("\n"):
        if line.strip():
            try:
                values.append(int(float(line.strip())))
            except ValueError:
                return GpuMemory(None, f"nvidia-smi printed {line.strip()[:60]!r}, not a memory size in MiB")
    if not values or min(values) <= 0:
        return GpuMemory(None, "nvidia-smi lists no GPU")
    return GpuMemory(min(values) * MIB)


def _gib(n: int) -> str:
    return f"{n / GIB:,.1f} GiB"


def kv_budget(
    *,
    kv_cache_memory_bytes: Optional[int],
    gpu_memory_utilization: float,
    tensor_parallel_size: int,
    weights_bytes: int,
    recipe_bytes: int,
    gpu: Optional[GpuMemory] = None,
) -> Budget:
    """The budget for these served flags; ``gpu`` defaults to asking nvidia-smi."""
    if kv_cache_memory_bytes is not None:
        return Budget(kv_cache_memory_bytes, f"--kv-cache-memory-bytes {kv_cache_memory_bytes:,}")
    gpu = gpu if gpu is not None else gpu_memory()
    if gpu.total_bytes is None:
        return Budget(
            recipe_bytes,
            f"the recipe's geometry.kv_cache_memory_gib {_gib(recipe_bytes)} ({gpu.why_not})",
            from_recipe=True,
        )
    per_rank = weights_bytes // max(tensor_parallel_size, 1)
    usable = int(gpu_memory_utilization * gpu.total_bytes)
    budget = usable - per_rank - ACTIVATION_RESERVE_BYTES
    return Budget(
        budget,
        f"--gpu-memory-utilization {gpu_memory_utilization:g} x {gpu.total_bytes // MIB:,} MiB "
        f"(nvidia-smi) = {_gib(usable)}, minus weights {_gib(per_rank)} per rank (safetensors "
        f"headers / TP {tensor_parallel_size}) minus an activation reserve of "
        f"{_gib(ACTIVATION_RESERVE_BYTES)} (an estimate) = {_gib(budget)}",
    )
