"""The environment a gate or start-check process sets before it first imports vLLM.

``TVM_FFI_DISABLE_TORCH_C_DLPACK=1``: vLLM's dependencies (xgrammar, FlashInfer) import apache-tvm-ffi,
whose import, where the image's torch lacks ``torch.Tensor.__dlpack_c_exchange_api__`` (torch 2.9 has
none) and no prebuilt ``torch_c_dlpack_ext`` is installed, builds that addon with the image's C++
compiler: a subprocess that imports torch again and compiles into ``~/.cache/tvm-ffi`` (10 s under qemu
where it fails for want of a compiler). Planning exchanges no tensor through it: the gate step would pay
it for nothing and could leave the addon in the image's layer, the start check would pay it at every
container start. Set only where unset (the caller's value stands) and only in the checking process:
``vllm serve`` gets the environment the entrypoint started with.
"""

from __future__ import annotations

import os

IMPORT_SETTINGS = {"TVM_FFI_DISABLE_TORCH_C_DLPACK": "1"}


def apply_import_settings() -> None:
    """Set IMPORT_SETTINGS in this process's environment where unset (before vLLM is imported)."""
    for name, value in IMPORT_SETTINGS.items():
        os.environ.setdefault(name, value)
