"""What lets vLLM's planning code run on a CPU box.

* ``import_glm5next``: without torchvision, ``import vllm.models.glm5next`` fails in
  its multimodal half; the package's submodules are then loaded without running
  its ``__init__`` (the classes are unchanged).
* ``import_kernel_module``: a backend module whose top level imports GPU kernels
  (flashinfer, FA kernels) is imported with placeholder packages that are
  removed again afterwards.
* ``model_registry_fallback``: vLLM's ``ModelRegistry`` resolves the model class
  for the mamba state shapes; if the GLM package cannot load here, vLLM's own
  state calculators answer instead (``Glm5NextStateShim``).
* ``patched``: an attribute replaced for the duration of a call.

The platform the planning runs under is serving_platform.py's.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import types
from typing import Any


def import_glm5next() -> None:
    """Make ``vllm.models.glm5next``'s submodules importable, with its ``__init__``
    skipped if that fails here."""
    try:
        importlib.import_module("vllm.models.glm5next")
        return
    except ImportError:
        pass
    import vllm.models  # noqa: F401

    for k in [k for k in sys.modules if k.startswith("vllm.models.glm5next")]:
        del sys.modules[k]
    pkgdir = os.path.join(os.path.dirname(sys.modules["vllm.models"].__file__), "glm5next")
    mod = types.ModuleType("vllm.models.glm5next")
    mod.__path__ = [pkgdir]
    mod.__package__ = "vllm.models.glm5next"
    sys.modules["vllm.models.glm5next"] = mod


class _Placeholder(types.ModuleType):
    """Stands in for a GPU kernel package (or a kernel a module lacks on a CPU
    build) while a backend module is imported; never called."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")

    def __call__(self, *a, **k):  # decorators applied at import time
        return a[0] if len(a) == 1 and callable(a[0]) and not k else self

    def __or__(self, other):  # ``Placeholder | None`` in annotations evaluated at import time
        return self

    __ror__ = __or__


def import_kernel_module(modname: str):
    """Import a backend module whose top level imports GPU kernels that a CPU
    box lacks (flashinfer, FA kernels in fa_utils).  Only the backend class's
    declarations (name, kernel block sizes, customize_spec) are used, which
    need none of them.  The stand-ins are removed again afterwards, so
    nothing else in the process sees a fake ``flashinfer``."""
    if modname in sys.modules:
        return sys.modules[modname]
    added_mods: list[str] = []
    added_attrs: list[tuple[Any, str]] = []
    try:
        for _ in range(20):
            try:
                return importlib.import_module(modname)
            except ModuleNotFoundError as exc:
                missing = exc.name
                if not missing or missing.startswith("vllm") or missing in sys.modules:
                    raise
                for k in [k for k in sys.modules if k.startswith(modname)]:
                    del sys.modules[k]
                parts = missing.split(".")
                for i in range(1, len(parts) + 1):
                    n = ".".join(parts[:i])
                    if n not in sys.modules:
                        m = _Placeholder(n)
                        m.__path__ = []
                        sys.modules[n] = m
                        added_mods.append(n)
            except ImportError as exc:
                mod = sys.modules.get(getattr(exc, "name", None) or "")
                attr = str(exc).split("'")[1] if "cannot import name" in str(exc) else None
                if mod is None or attr is None or hasattr(mod, attr):
                    raise
                setattr(mod, attr, _Placeholder(attr))
                added_attrs.append((mod, attr))
        raise ImportError(f"cannot import {modname} with stand-ins")
    finally:
        for n in added_mods:
            sys.modules.pop(n, None)
        for mod, attr in added_attrs:
            delattr(mod, attr)


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Any):
    """``obj.name`` set to ``value`` inside the block, as it was after it."""
    had = name in vars(obj)
    old = vars(obj).get(name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, old)
        else:
            delattr(obj, name)


class Glm5NextStateShim:
    """Only used when ``vllm.models.glm5next`` cannot be imported (CPU box
    without torchvision): the two classmethods ``_align_hybrid_block_size``
    calls, doing what ``Glm5NextForCausalLM``'s do (vllm/models/glm5next/
    common/model.py) with vLLM's own calculators."""

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config):
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator

        return MambaStateDtypeCalculator.kda_state_dtype(
            vllm_config.model_config.dtype,
            vllm_config.cache_config.mamba_cache_dtype,
            vllm_config.cache_config.mamba_ssm_cache_dtype,
        )

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

        hf = vllm_config.model_config.hf_text_config
        spec = vllm_config.speculative_config
        return MambaStateShapeCalculator.kda_state_shape(
            vllm_config.parallel_config.tensor_parallel_size,
            hf.linear_num_heads,
            hf.linear_head_dim,
            conv_kernel_size=hf.linear_conv_kernel_dim,
            num_spec=spec.num_speculative_tokens if spec else 0,
        )


# The fallback is announced once per process (the first plan that needs it).
_SHIM_NOTED: list = []


class _CaptureErrors(logging.Filter):
    """Keeps the exceptions a logger reports, one line each, and drops the records."""

    def __init__(self):
        super().__init__()
        self.errors: list[str] = []

    def filter(self, record):
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return False
        return True


@contextlib.contextmanager
def model_registry_fallback():
    """Resolve model classes through vLLM's registry; fall back to the shim
    only if the GLM package cannot be imported here."""
    from vllm.model_executor.models import ModelRegistry

    real = ModelRegistry.resolve_model_cls
    # vLLM logs a failed model-class load with a full traceback; here that failure is
    # expected on a CPU build and answered by the shim, so it gets one line instead.
    registry_log = logging.getLogger("vllm.model_executor.models.registry")
    capture = _CaptureErrors()

    def resolve(architecture, *a, **k):
        registry_log.addFilter(capture)
        try:
            return real(architecture, *a, **k)
        except Exception as exc:
            arch = architecture[0] if isinstance(architecture, list) else architecture
            if arch != "Glm5NextForCausalLM":
                raise
            if not _SHIM_NOTED:
                _SHIM_NOTED.append(arch)
                reason = capture.errors[-1] if capture.errors else f"{type(exc).__name__}: {exc}"
                print(
                    f"oracle: vLLM cannot load {arch} here ({reason}); its state shape and dtype "
                    "come from vLLM's own calculators instead",
                    file=sys.stderr,
                )
            return Glm5NextStateShim, arch
        finally:
            registry_log.removeFilter(capture)

    with patched(ModelRegistry, "resolve_model_cls", resolve):
        yield
