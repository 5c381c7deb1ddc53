"""The platform vLLM plans under inside the oracle: the GPU the image serves on, whatever the host.

vLLM resolves ``vllm.platforms.current_platform`` once per process:
``VLLM_TARGET_DEVICE=cpu`` selects ``CpuPlatform`` (what the pre-flight sets so that
parsing and planning never touch a GPU); otherwise the detected accelerator
(``CudaPlatform`` in a GB300 container), or ``UnspecifiedPlatform`` where there is none
(the image's build, where the gate runs; a CPU-only host). Planning reads the platform in
two ways: ``VllmConfig.__post_init__`` runs its config hooks, and layers and backends ask
it questions (capability, ``is_cuda()``, ...). ``CpuPlatform`` changes the geometry:

* ``check_and_update_config`` resets ``mamba_ssm_cache_dtype`` to float32 on a CPU with
  AVX512-BF16 (a Qwen3-Next GDN state page doubles, and the hybrid block with it);
* it turns async scheduling off: one batch in flight instead of two, so a sliding-window
  group holds fewer blocks per request (``max_in_flight_tokens``).

So the oracle does not plan under the process's platform. Inside ``serving_platform``
the platform object everyone holds (modules bind it at import) is switched to the base
``Platform``'s behaviour, ``UnspecifiedPlatform`` (what the build's gate runs under),
reporting the capability of the GPU family and, as ``CudaPlatform`` does, support for
the hybrid KV cache manager (the gate's path turns it on in vllm_config.py anyway; the
engine-core path relies on this). That is vLLM's CUDA platform for planning: the rest
of what ``CudaPlatform`` overrides on the planning path does not touch the geometry
(``check_and_update_config``: the worker class and multimodal chunking;
``update_block_size_for_backend``: CUDA keeps the base one, which plan.py calls), and
``CudaPlatform`` itself cannot stand in because its ``is_cuda()`` branches import CUDA
kernels a CPU host lacks. What it does give the serving platform is its attention-backend
selection (``get_attn_backend_cls`` / ``get_valid_backends``, backend_selection.py): a layer
vLLM lets choose (the drafter's, layers.py) gets the backend CUDA would pick on the
family's capability. Every caller (the gate, the pre-flight, the tests, the engine-core CLI)
thus gets the same answer, whatever VLLM_TARGET_DEVICE says and whatever the host has.

A recipe without a GPU (``CPU_FAMILY``) is planned under ``CpuPlatform`` itself: vLLM's CPU
platform, whose ``update_block_size_for_backend`` prefers 128-token blocks. It asks the CPU
``torch.cpu._is_avx512_bf16_supported()``; inside the block that answers for the serving CPU the
gate input names (``cpu_avx512_bf16``), as the capability answers for the serving GPU.

Modules vLLM first imports inside the block take their import-time platform branches
for this platform, as they do in the build's gate.
"""

from __future__ import annotations

import contextlib
import functools

from geometry.kv.backends import CPU_FAMILY
from geometry.oracle.backend_selection import clear_selection_cache, cuda_attn_backend_cls, cuda_valid_backends

# The capability reported for a family: vLLM's family test (and every SM12x
# choice in the planning path) reads the major only; 12.1 is GB10 (DGX Spark).
FAMILY_CAPABILITY = {90: (9, 0), 100: (10, 3), 120: (12, 1)}


@functools.cache
def platform_class(family: int) -> type:
    """The base platform reporting the capability of ``family`` (one class per family)."""
    from vllm.platforms.interface import DeviceCapability, UnspecifiedPlatform

    capability = DeviceCapability(*FAMILY_CAPABILITY[family])

    class ServingPlatform(UnspecifiedPlatform):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return capability

        @classmethod
        def support_hybrid_kv_cache(cls) -> bool:
            # CudaPlatform's answer: VllmConfig then leaves the hybrid KV cache manager on.
            return True

        # CudaPlatform's attention-backend selection, on this capability (backend_selection.py);
        # its messages name the device as CudaPlatform's do.
        device_name = "cuda"

        @classmethod
        def get_valid_backends(cls, device_capability, attn_selector_config, num_heads=None):
            return cuda_valid_backends(cls, device_capability, attn_selector_config, num_heads)

        @classmethod
        def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
            return cuda_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads)

    ServingPlatform.__name__ = ServingPlatform.__qualname__ = f"ServingPlatform{family}"
    return ServingPlatform


@contextlib.contextmanager
def serving_platform(family: int, cpu_avx512_bf16: bool | None = None):
    """vLLM's current platform behaves as the serving GPU's of ``family`` (``CPU_FAMILY``: vLLM's
    CPU platform, on a CPU with AVX512-BF16 or not as ``cpu_avx512_bf16`` says; None: this host's)
    inside the block (the class of the one platform object is switched, and switched back after
    it); yields the platform class."""
    from vllm.platforms import current_platform

    detected = type(current_platform)
    clear_selection_cache()
    with contextlib.ExitStack() as stack:
        if family == CPU_FAMILY:
            from vllm.platforms.cpu import CpuPlatform

            current_platform.__class__ = CpuPlatform
            if cpu_avx512_bf16 is not None:
                stack.enter_context(_avx512_bf16_answer(cpu_avx512_bf16))
        else:
            current_platform.__class__ = platform_class(family)
        try:
            yield type(current_platform)
        finally:
            current_platform.__class__ = detected
            clear_selection_cache()


@contextlib.contextmanager
def _avx512_bf16_answer(answer: bool):
    """``torch.cpu._is_avx512_bf16_supported()`` (what CpuPlatform calls at each use) returns ``answer``."""
    import torch.cpu

    asked = torch.cpu._is_avx512_bf16_supported
    torch.cpu._is_avx512_bf16_supported = lambda: answer
    try:
        yield
    finally:
        torch.cpu._is_avx512_bf16_supported = asked
