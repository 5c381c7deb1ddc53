"""Layer objects vLLM's planning collects specs from, built on a CPU host.

* ``attention_layer``: vLLM's own ``Attention``, through its constructor (the cache dtype, sliding
  window, heads and, without ``backend``, vLLM's backend selection: backend_selection.py); only its
  kernel implementation (``impl_cls``, whose constructor allocates device buffers and asks the GPU's
  kernel libraries) is stood in for (``KernelImplStandIn``), which ``get_kv_cache_spec`` never reads.
* ``bare_layer``: an instance whose constructor is skipped, given the attributes its
  ``get_kv_cache_spec`` reads, for layers whose constructors need vLLM's tensor-parallel group
  sized to the served TP (their linear layers) or CUDA kernels (MLA, KDA/GDN).
* ``model_parallel_group``: vLLM's tensor-parallel group of one rank (gloo, CPU), for replicated
  modules (the GLM indexer) whose shapes do not depend on the TP size.
* ``backend_classes``: the simulator's table (geometry/kv/backends.py) for the target's layers, mapped
  to vLLM's classes.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import tempfile

from geometry.oracle.cpu_shims import patched


class KernelImplStandIn:
    """Stands in for an attention backend's ``AttentionImpl`` (its kernels) while an ``Attention`` is
    constructed; planning never calls it."""

    supports_quant_query_input = False

    def __init__(self, *args, **kwargs):
        pass


@contextlib.contextmanager
def _kernel_impls_stood_in():
    """Inside the block, every backend class vLLM selects for an ``Attention`` (or ``add``) gives the
    constructor ``KernelImplStandIn``; yields ``add``."""
    import vllm.model_executor.layers.attention.attention as attention

    real = attention.get_attn_backend
    with contextlib.ExitStack() as stack:

        def add(cls):
            stack.enter_context(patched(cls, "get_impl_cls", staticmethod(lambda: KernelImplStandIn)))
            return cls

        with patched(attention, "get_attn_backend", lambda *a, **k: add(real(*a, **k))):
            yield add


def attention_layer(name, num_heads, num_kv_heads, head_size, cache_config, window, model_dtype, backend=None):
    """vLLM's ``Attention`` as a model builds it (``num_heads`` / ``num_kv_heads`` per rank) under the
    current vLLM config, registered in its static forward context; ``backend`` None: the backend vLLM
    selects for it."""
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.utils.torch_utils import set_default_torch_dtype

    with _kernel_impls_stood_in() as add, set_default_torch_dtype(model_dtype):
        if backend is not None:
            add(backend)
        return Attention(
            num_heads,
            head_size,
            head_size**-0.5,
            num_kv_heads=num_kv_heads,
            cache_config=cache_config,
            per_layer_sliding_window=window,
            prefix=name,
            attn_backend=backend,
        )


@functools.cache
def model_parallel_group() -> None:
    """vLLM's distributed state with one rank and a tensor-parallel group of one (gloo, on the CPU),
    made once per process unless vLLM already has one."""
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps

    if ps.model_parallel_is_initialized():
        return
    directory = tempfile.mkdtemp(prefix="geometry-oracle-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)  # the file store lives as long as the process
    rendezvous = os.path.join(directory, "rendezvous")
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        ps.init_distributed_environment(
            world_size=1, rank=0, distributed_init_method=f"file://{rendezvous}", local_rank=0, backend="gloo"
        )
        ps.initialize_model_parallel(1)


def bare_layer(cls, **attrs):
    """An instance whose constructor (which builds CUDA kernels) is skipped."""
    import torch.nn as nn

    obj = cls.__new__(cls)
    if isinstance(obj, nn.Module):
        nn.Module.__init__(obj)
    for k, v in attrs.items():
        object.__setattr__(obj, k, v)
    return obj


def backend_classes(family: int):
    """(sparse MLA backend class of ``family`` or None, the class of the drafter's and the target's
    full-attention layers: FLASH_ATTN on a GPU family, CPU_ATTN on vLLM's CPU platform)."""
    from geometry.kv.backends import CPU_FAMILY

    if family == CPU_FAMILY:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        return None, CPUAttentionBackend
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.attention.backends.mla import flashinfer_mla_sparse as fims
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm90 import (
        FlashInferMLASparseSM90Backend,
    )

    mla = {
        100: fims.FlashInferMLASparseTRTLLMBackend,
        120: fims.FlashInferMLASparseSM120Backend,
        90: FlashInferMLASparseSM90Backend,
    }.get(family)
    return mla, FlashAttentionBackend
