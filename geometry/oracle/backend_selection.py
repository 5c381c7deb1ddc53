"""vLLM's own attention-backend selection (``CudaPlatform.get_attn_backend_cls``), run on a CPU host
for the serving GPU's capability.

An ``Attention`` layer asks ``vllm.v1.attention.selector.get_attn_backend``, which asks the current
platform; on a GPU that is ``CudaPlatform``: its priority list for the capability
(``_get_backend_priorities``), then each candidate class's ``validate_configuration`` (head size,
model dtype, KV cache dtype, block size, causality, sliding window, compute capability, ...), the
first valid one wins. serving_platform.py gives the planning platform these two methods of
``CudaPlatform``, bound to it (so ``get_device_capability`` is the serving family's). What a CPU host
lacks for them is stood in for here, and nothing else:

* ``vllm.platforms.cuda`` imports the compiled ``vllm._C_stable_libtorch``, which needs libcuda:
  it is imported with that module stood in (``cuda_platform``); the selector never calls it.
* each candidate backend class is imported with the GPU kernel packages its module imports stood in
  (cpu_shims.import_kernel_module): on the serving image they are installed, and a class missing
  here would otherwise count as "unavailable" and fall out of the list.
* FLASH_ATTN's answer for a quantized cache depends on the FlashAttention version vLLM resolves
  for the capability (``fa_utils.get_flash_attn_version``: FA3 on SM90, FA4 on SM10x, FA2 on SM12x),
  which asks ``vllm.vllm_flash_attn.flash_attn_interface`` which versions the wheel ships. The FA2
  and FA3 extensions are in the wheel (``_vllm_fa2_C`` / ``_vllm_fa3_C``) but load only with
  libcuda: while a backend is selected (``flash_attn_as_shipped``) the extensions present in the
  installed tree are stood in for, so vLLM's own interface and capability checks decide; an
  extension the tree does not ship stays missing.

* a backend module that makes GPU state at import (CUTLASS_MLA's SM100 workspace) is imported with its
  CUDA buffers on the meta device (``_gpu_state_at_import``): vLLM's loop over the candidates lets only
  ImportError and OSError through, so the CUDA error would stop every MLA selection on SM10x.

* FLASHINFER's kernel block sizes on SM10x (asked for a user ``--block-size``) depend on whether
  TRT-LLM attention is available (``supports_trtllm_attention``: flashinfer-cubin installed, else a
  request to NVIDIA's artifactory). Which candidate is valid does not depend on it (both lists take
  every multiple of 16), so while a backend is selected it answers "unavailable" instead of asking
  the network (``_no_artifactory``); the simulator refuses FLASHINFER on SM10x for this reason.

The selection cache (``_cached_get_attn_backend``) is not keyed on the platform: serving_platform.py
clears it whenever the platform changes.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import sys
import types

from geometry.oracle.cpu_shims import import_kernel_module, patched

_COMPILED_OPS = "vllm._C_stable_libtorch"
_FA_PACKAGE = "vllm.vllm_flash_attn"
_FA_EXTENSIONS = ("_vllm_fa2_C", "_vllm_fa3_C")


def cuda_platform():
    """``vllm.platforms.cuda`` (its ``CudaPlatform`` and selector functions), imported with the
    compiled ops it loads at import time stood in for where libcuda is missing."""
    name = "vllm.platforms.cuda"
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # no libcuda here (a CUDA wheel), or a build without the compiled ops
        if "libcuda" not in str(exc) and exc.name != _COMPILED_OPS:
            raise
    sys.modules.pop(name, None)
    stood_in = _COMPILED_OPS not in sys.modules
    if stood_in:
        sys.modules[_COMPILED_OPS] = types.ModuleType(_COMPILED_OPS)
    try:
        return importlib.import_module(name)
    finally:
        if stood_in:
            sys.modules.pop(_COMPILED_OPS, None)


def _shipped_extensions() -> tuple[str, ...]:
    """The FlashAttention extension modules the installed vLLM ships, by its wheel's ``RECORD`` (a tree
    whose compiled kernels were removed, as the test bases and the overlay tests' copies are, still
    lists them), else by the ``.so`` files beside the package."""
    spec = importlib.util.find_spec(_FA_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return ()
    return _shipped_in(tuple(spec.submodule_search_locations))


@functools.cache
def _shipped_in(locations: tuple[str, ...]) -> tuple[str, ...]:
    """``_shipped_extensions`` for the package directories ``locations`` (read once per process)."""
    recorded = _recorded_files(locations)
    shipped = []
    for ext in _FA_EXTENSIONS:
        for location in locations:
            names = recorded if recorded is not None else os.listdir(location)
            if any(f.startswith(ext + ".") and f.endswith(".so") for f in names):
                shipped.append(ext)
                break
    return tuple(shipped)


def _recorded_files(locations) -> list[str] | None:
    """The file names the vLLM distribution's RECORD lists under ``vllm/vllm_flash_attn/`` (None: no RECORD
    beside the package)."""
    for location in locations:
        site = os.path.dirname(os.path.dirname(os.path.abspath(location)))
        for entry in sorted(os.listdir(site)):
            record = os.path.join(site, entry, "RECORD")
            if entry.startswith("vllm") and entry.endswith(".dist-info") and os.path.isfile(record):
                with open(record, encoding="utf-8") as fh:
                    paths = [line.split(",", 1)[0] for line in fh]
                return [path.rsplit("/", 1)[1] for path in paths if path.startswith("vllm/vllm_flash_attn/")]
    return None


def _fa_modules() -> dict:
    return {k: m for k, m in sys.modules.items() if k == _FA_PACKAGE or k.startswith(_FA_PACKAGE + ".")}


def _fa_interface_loads():
    """vLLM's ``flash_attn_interface`` as this host imports it, if its FA2 or FA3 extension loads."""
    try:
        interface = importlib.import_module(_FA_PACKAGE + ".flash_attn_interface")
    except ImportError:
        return None
    return interface if interface.FA2_AVAILABLE or interface.FA3_AVAILABLE else None


@contextlib.contextmanager
def flash_attn_as_shipped():
    """Inside the block vLLM's ``flash_attn_interface`` answers as on a GPU host of the same wheel: the
    FA extensions the tree ships count as loaded. Outside it the process has the modules it had."""
    if _fa_interface_loads() is not None:  # a GPU host: the extensions load
        yield
        return
    saved = _fa_modules()
    for k in saved:
        del sys.modules[k]
    for ext in _shipped_extensions():
        name = f"{_FA_PACKAGE}.{ext}"
        sys.modules[name] = types.ModuleType(name)
    try:
        importlib.import_module(_FA_PACKAGE + ".flash_attn_interface")
        yield
    finally:
        for k in _fa_modules():
            del sys.modules[k]
        sys.modules.update(saved)


def backend_class(backend):
    """``vllm.platforms.cuda._get_attn_backend_class``, with the class's module imported as the
    serving image has it (its GPU kernel packages stood in for)."""
    module, _, _ = backend.value.rpartition(".")
    _import_backend_module(module)
    return backend.get_class()


def _import_backend_module(module: str) -> None:
    # vllm._custom_ops and vllm.utils.flashinfer read the host at import time (whether flashinfer
    # is installed); they are imported as the host has them before any stand-in exists.
    importlib.import_module("vllm._custom_ops")
    importlib.import_module("vllm.utils.flashinfer")
    with _gpu_state_at_import():
        import_kernel_module(module)


@contextlib.contextmanager
def _gpu_state_at_import():
    """A backend module that makes GPU state when imported (CUTLASS_MLA's SM100 workspace: a buffer on the GPU
    and the device's SM count) imports inside the block: its CUDA buffers are made on the meta device and the
    platform counts no SMs. The class's declarations, which the selection reads, depend on neither; outside the
    block ``torch.empty`` and the platform are as they were."""
    import torch
    from vllm.platforms import current_platform

    real_empty = torch.empty

    def empty(*args, device=None, **kwargs):
        if device is not None and torch.device(device).type == "cuda":
            device = "meta"
        return real_empty(*args, device=device, **kwargs)

    with (
        patched(torch, "empty", empty),
        patched(type(current_platform), "num_compute_units", classmethod(lambda cls, device_id=0: 0)),
    ):
        yield


@contextlib.contextmanager
def _no_artifactory():
    """``vllm.utils.flashinfer.supports_trtllm_attention`` answers False inside the block (see the
    module docstring); its cached answer outside it is untouched."""
    flashinfer_utils = importlib.import_module("vllm.utils.flashinfer")
    with patched(flashinfer_utils, "supports_trtllm_attention", lambda is_prefill=False: False):
        yield


def _selecting():
    stack = contextlib.ExitStack()
    stack.enter_context(flash_attn_as_shipped())
    stack.enter_context(patched(cuda_platform(), "_get_attn_backend_class", backend_class))
    stack.enter_context(_no_artifactory())
    return stack


def cuda_valid_backends(platform_cls, device_capability, attn_selector_config, num_heads=None):
    """``CudaPlatform.get_valid_backends`` on ``platform_cls`` (the serving platform)."""
    cuda = cuda_platform()
    with _selecting():
        return cuda.CudaPlatform.get_valid_backends.__func__(
            platform_cls, device_capability, attn_selector_config, num_heads
        )


def cuda_attn_backend_cls(platform_cls, selected_backend, attn_selector_config, num_heads=None) -> str:
    """``CudaPlatform.get_attn_backend_cls`` on ``platform_cls`` (the serving platform): the qualified
    name of the backend class vLLM runs the layer on, ValueError when none is valid."""
    cuda = cuda_platform()
    with _selecting():
        return cuda.CudaPlatform.get_attn_backend_cls.__func__(
            platform_cls, selected_backend, attn_selector_config, num_heads
        )


def clear_selection_cache() -> None:
    """Forget the selections made under another platform (vLLM caches them per process)."""
    from vllm.v1.attention import selector

    selector._cached_get_attn_backend.cache_clear()
