"""Plan the KV-cache geometry with the *imported* vLLM (whatever ``vllm`` is on
sys.path: the pristine 0.33.0 tree, the image's patched one, or a patched copy
a test points PYTHONPATH at) and return it as a ``GeometryReport``.

No GPU is needed.  What is real and what is a stand-in:

* real vLLM code: the spec classes, every layer class's ``get_kv_cache_spec``
  (KDA/GDN, MLA, sparse-indexer and kpool-tail caches, drafter ``Attention``),
  the runner's ``get_kv_cache_spec`` (``vllm.v1.worker.gpu.attn_utils``, which
  applies ``customize_attention_spec`` and tags draft layers),
  ``Platform.update_block_size_for_backend`` (run on the base ``Platform``;
  it resolves the model class through vLLM's ``ModelRegistry`` for the mamba
  state shapes), ``Glm5NextModelConfig.verify_and_update_config``,
  ``resolve_kv_cache_layout``, ``get_kv_cache_groups`` and
  ``get_kv_cache_config_from_groups``; the backend classes' kernel block sizes,
  layouts and ``customize_spec``.
* stand-ins: ``VllmConfig`` is real, but its ``model_config`` is a small object
  carrying the attributes those functions read (HF config, dtype,
  ``use_mla``, ``get_num_kv_heads``, ``get_head_size``, ...) and
  ``speculative_config`` carries ``method``/``num_speculative_tokens``/
  ``kv_cache_dtype``/``attention_backend``; layers whose constructors build
  CUDA kernels (MLA, KDA/GDN, ``Attention``) are created without their
  constructors and given the attributes their ``get_kv_cache_spec`` reads; the
  GLM indexer and kpool-tail caches are constructed normally.  The GPU's
  capability family is reported by patching the platform's
  ``get_device_capability`` for the duration of the call, and ``is_cuda`` only
  around ``Glm5NextModelConfig``.
* backend *choice* (needs libcuda in vLLM): the same table as the simulator
  (geometry/backends.py), mapped to vLLM's classes here.
* On a CPU box without torchvision, ``import vllm.models.glm5next`` fails in
  its multimodal half; the oracle then loads the package's submodules without
  running its ``__init__`` (the classes are unchanged).

The engine-core path (``engine_core_plan``, ``engine_core_summary``, ``python
-m geometry.oracle --engine-core``, at the end of this file) plans explicit
GLM-5.3 + DFlash2 parameters through ``EngineCore._initialize_kv_caches``:
the global block size after grouping, and the scheduler's hash and cache-hit
block sizes.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import types
from dataclasses import replace as dc_replace
from typing import Any

from . import backends as B
from . import record
from .block_size import DEFAULT_BLOCK_SIZE
from .drafter import drafter_sliding_window
from .model import model_kind, resolve_model_dtype
from .model_parts import text_config
from .report import GeometryReport, GroupRow, LayerRow, Plan
from .simulate import simulate
from .inputs import GeometryInputs
from .prefix_cache import PrefixCache, can_hit

# The capability reported for a family: vLLM's family test (and every SM12x
# choice in the planning path) reads the major only; 12.1 is GB10 (DGX Spark).
_FAMILY_CAPABILITY = {90: (9, 0), 100: (10, 3), 120: (12, 1)}


def _import_glm5next() -> None:
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


def _import_kernel_module(modname: str):
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
def _patched(obj: Any, name: str, value: Any):
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


@contextlib.contextmanager
def _capability(family: int):
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    cap = DeviceCapability(*_FAMILY_CAPABILITY[family])
    cls = type(current_platform)
    with _patched(cls, "get_device_capability",
                  classmethod(lambda c, device_id=0: cap)):
        yield


class _ModelConfig:
    """Stand-in for vllm.config.ModelConfig with what the planning reads."""

    def __init__(self, hf, arch: str, dtype, max_model_len: int, use_mla: bool,
                 head_size: int, total_kv_heads: int):
        self.hf_config = hf
        self.hf_text_config = hf
        self.architecture = arch
        self.architectures = [arch]
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.use_mla = use_mla
        self.is_hybrid = True
        self.is_mm_prefix_lm = False
        self.is_multimodal_model = False
        self._head_size = head_size
        self._total_kv = total_kv_heads
        self.model = "glm53-geometry-oracle"
        self.rswa_window = None
        self.model_impl = "auto"
        self.runner_type = "generate"
        self.convert_type = "none"

    def get_head_size(self) -> int:
        return self._head_size

    def get_num_kv_heads(self, parallel_config) -> int:
        if self.use_mla:
            return 1
        return max(1, self._total_kv // parallel_config.tensor_parallel_size)

    def get_num_attention_heads(self, parallel_config) -> int:
        return self.hf_text_config.num_attention_heads // parallel_config.tensor_parallel_size


def _hf_config(kind: str, cfg: dict):
    tc = text_config(cfg)
    tc = {k: v for k, v in tc.items() if not k.startswith("_")}
    try:
        import transformers

        if kind == "glm5next":
            return transformers.Glm5NextTextConfig(**tc)
        if kind == "kimi_linear":
            from vllm.transformers_utils.configs.kimi_linear import KimiLinearConfig

            return KimiLinearConfig(**tc)
        return transformers.Qwen3NextConfig(**tc)
    except Exception:  # pragma: no cover - older transformers
        return types.SimpleNamespace(**tc)


class _Glm5NextStateShim:
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
            vllm_config.cache_config.mamba_ssm_cache_dtype)

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config):
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

        hf = vllm_config.model_config.hf_text_config
        spec = vllm_config.speculative_config
        return MambaStateShapeCalculator.kda_state_shape(
            vllm_config.parallel_config.tensor_parallel_size, hf.linear_num_heads,
            hf.linear_head_dim, conv_kernel_size=hf.linear_conv_kernel_dim,
            num_spec=spec.num_speculative_tokens if spec else 0)


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
def _model_registry_fallback():
    """Resolve model classes through vLLM's registry; fall back to the shim
    only if the GLM package cannot be imported here."""
    from vllm.model_executor.models import ModelRegistry

    real = ModelRegistry.resolve_model_cls
    used = []
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
                print(f"oracle: vLLM cannot load {arch} here ({reason}); its state shape and dtype "
                      "come from vLLM's own calculators instead", file=sys.stderr)
            used.append(arch)
            return _Glm5NextStateShim, arch
        finally:
            registry_log.removeFilter(capture)

    with _patched(ModelRegistry, "resolve_model_cls", resolve):
        yield used


def _new(cls, **attrs):
    """An instance whose constructor (which builds CUDA kernels) is skipped."""
    import torch.nn as nn

    obj = cls.__new__(cls)
    if isinstance(obj, nn.Module):
        nn.Module.__init__(obj)
    for k, v in attrs.items():
        object.__setattr__(obj, k, v)
    return obj


def _backend_classes(family: int):
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.attention.backends.mla import flashinfer_mla_sparse as fims
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm90 import (
        FlashInferMLASparseSM90Backend,
    )

    mla = {100: fims.FlashInferMLASparseTRTLLMBackend,
           120: fims.FlashInferMLASparseSM120Backend,
           90: FlashInferMLASparseSM90Backend}.get(family)
    return mla, FlashAttentionBackend


def _build(inputs: GeometryInputs, with_drafter: bool, num_spec: int):
    import torch
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.attention.backend import AttentionType

    kind = model_kind(inputs.target_config)
    tc = text_config(inputs.target_config)
    tp = inputs.tensor_parallel_size
    hf = _hf_config(kind, dict(inputs.target_config))
    dtype = getattr(torch, resolve_model_dtype(inputs.target_config))
    max_len = inputs.max_model_len or int(tc.get("max_position_embeddings") or 1)
    if kind == "glm5next":
        head_size = hf.kv_lora_rank + hf.qk_rope_head_dim
        mc = _ModelConfig(hf, "Glm5NextForCausalLM", dtype, max_len, True, head_size, 1)
    elif kind == "kimi_linear":
        head_size = hf.kv_lora_rank + hf.qk_rope_head_dim  # ModelArchConfigConvertor (MLA)
        mc = _ModelConfig(hf, "KimiLinearForCausalLM", dtype, max_len, True, head_size, 1)
    else:
        hd = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        mc = _ModelConfig(hf, "Qwen3NextForCausalLM", dtype, max_len, False, hd,
                          hf.num_key_value_heads)

    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"))
    cfg.model_config = mc
    cfg.parallel_config.tensor_parallel_size = tp
    cfg.scheduler_config.disable_hybrid_kv_cache_manager = False
    cache = cfg.cache_config
    cache.cache_dtype = inputs.kv_cache_dtype
    if inputs.block_size is not None:
        cache.block_size = inputs.block_size
        cache.user_specified_block_size = True
    else:
        cache.block_size = DEFAULT_BLOCK_SIZE
        cache.user_specified_block_size = False
    # EngineArgs builds the cache config with prefix caching resolved and
    # mamba_cache_mode left at "none"; MambaModelConfig (below) derives the
    # mode and the mamba block size from it.
    cache.enable_prefix_caching = inputs.enable_prefix_caching
    cache.mamba_cache_mode = "none"
    cache.mamba_block_size = None
    cfg.scheduler_config.enable_chunked_prefill = True  # default for generative models
    drafter = inputs.drafter_config if with_drafter else None
    spec_cfg = None
    if num_spec or drafter is not None:
        spec_cfg = types.SimpleNamespace(
            method="dflash", num_speculative_tokens=num_spec,
            kv_cache_dtype=inputs.drafter_kv_cache_dtype if drafter is not None else None,
            attention_backend=inputs.drafter_attention_backend, draft_model_config=None,
            parallel_drafting=True)  # DFlash drafts all positions in one pass
    cfg.speculative_config = spec_cfg

    if kind == "glm5next":
        from vllm.model_executor.models.config import Glm5NextModelConfig
        from vllm.platforms import current_platform

        with _patched(type(current_platform), "is_cuda", lambda self: True):
            Glm5NextModelConfig.verify_and_update_config(cfg)
    # VllmConfig.try_verify_and_update_config: the architecture's hook, then
    # the hybrid one for every hybrid model.
    from vllm.model_executor.models.config import HybridAttentionMambaModelConfig

    HybridAttentionMambaModelConfig.verify_and_update_config(cfg)
    if cache.mamba_cache_mode != inputs.mamba_cache_mode:
        raise ValueError(f"vLLM runs mamba_cache_mode {cache.mamba_cache_mode!r} with prefix "
                         f"caching {inputs.enable_prefix_caching}, the input says "
                         f"{inputs.mamba_cache_mode!r}")

    ctx = cfg.compilation_config.static_forward_context
    ctx.clear()
    mla_cls, fa_cls = _backend_classes(inputs.capability_family)
    model_kv = cache.cache_dtype
    layer_types = list(getattr(hf, "layer_types", None) or [])

    with set_current_vllm_config(cfg):
        if kind == "glm5next":
            _import_glm5next()
            from vllm.models.glm5next.common.attention import (
                Glm5NextIndexerCache,
                Glm5NextTailCache,
            )
            from vllm.models.glm5next.common.kda import Glm5NextLinearAttention

            if mla_cls is None:
                raise ValueError(f"no sparse MLA backend for family {inputs.capability_family}")
            model_kv = _sparse_mla_kv_cache_dtype(mla_cls, cache)
            idx_hd = hf.index_head_dim
            for i in range(hf.num_hidden_layers):
                p = f"model.layers.{i}.self_attn"
                lt = layer_types[i]
                if lt == "linear_attention":
                    ctx[p] = _new(
                        Glm5NextLinearAttention, prefix=p, tp_size=tp,
                        num_heads=hf.linear_num_heads, head_dim=hf.linear_head_dim,
                        conv_size=hf.linear_conv_kernel_dim, num_spec=num_spec,
                        model_config=mc, cache_config=cache, vllm_config=cfg,
                        kda_prefill_backend="triton", _checkpoint_alignment=None)
                    continue
                Glm5NextIndexerCache(head_dim=idx_hd + idx_hd // 128 * 4, dtype=torch.uint8,
                                     prefix=p + ".indexer.k_cache", cache_config=cache,
                                     index_kpool=hf.index_kpool)
                Glm5NextTailCache(head_dim=idx_hd, dtype=torch.bfloat16,
                                  prefix=p + ".indexer.tail_cache", cache_config=cache,
                                  index_kpool=hf.index_kpool)
                ctx[p + ".mla_attn"] = _new(
                    MLAAttention, layer_name=p + ".mla_attn", kv_cache_dtype=model_kv,
                    head_size=hf.kv_lora_rank + hf.qk_rope_head_dim, sliding_window=None,
                    topk_buffer_width=None, indexer=object(),
                    non_causal_multi_token_decode=False, attn_backend=mla_cls,
                    kv_sharing_target_layer_name=None)
        elif kind == "kimi_linear":
            _kimi_layers(inputs, cfg, mc, hf, ctx, tp, num_spec, model_kv)
        else:
            from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
                QwenGatedDeltaNetAttention,
            )

            if not layer_types:
                interval = getattr(hf, "full_attention_interval", 4)
                layer_types = ["linear_attention" if (i + 1) % interval else "full_attention"
                               for i in range(hf.num_hidden_layers)]
            hd = mc.get_head_size()
            for i in range(hf.num_hidden_layers):
                p = f"model.layers.{i}"
                if layer_types[i] == "linear_attention":
                    ctx[p + ".linear_attn"] = _new(
                        QwenGatedDeltaNetAttention, prefix=p + ".linear_attn", tp_size=tp,
                        num_k_heads=hf.linear_num_key_heads,
                        num_v_heads=hf.linear_num_value_heads,
                        head_k_dim=hf.linear_key_head_dim, head_v_dim=hf.linear_value_head_dim,
                        conv_kernel_size=hf.linear_conv_kernel_dim, num_spec=num_spec,
                        model_config=mc, cache_config=cache, vllm_config=cfg,
                        _checkpoint_alignment=None)
                else:
                    ctx[p + ".self_attn.attn"] = _attention(
                        Attention, AttentionType, fa_cls, p + ".self_attn.attn",
                        mc.get_num_kv_heads(cfg.parallel_config), hd, model_kv,
                        kv_cache_dtype_str_to_dtype(model_kv, mc), None, False)

        if drafter is not None:
            # load_dflash_model: the drafter's own dtype, else the cache
            # config's as the target's layers left it
            d_kv_str = cfg.speculative_config.kv_cache_dtype or cache.cache_dtype
            if not _drafter_backend_takes(fa_cls, d_kv_str, inputs.capability_family):
                raise ValueError(  # CudaPlatform.get_attn_backend_cls, selected backend
                    f"Selected backend {fa_cls.get_name()} is not valid for this "
                    "configuration. Reason: ['kv_cache_dtype not supported']")
            dc = drafter
            heads = dc["num_attention_heads"]
            total_kv = dc.get("num_key_value_heads") or heads
            hd = dc.get("head_dim") or dc["hidden_size"] // heads
            for i in range(dc["num_hidden_layers"]):
                window = drafter_sliding_window(dc, i)
                name = f"drafter.model.layers.{i}.self_attn.attn"
                ctx[name] = _attention(
                    Attention, AttentionType, fa_cls, name, max(1, total_kv // tp), hd,
                    d_kv_str, kv_cache_dtype_str_to_dtype(d_kv_str, mc), window, True)
    return cfg, kind


def _drafter_backend_takes(fa_cls, kv_cache_dtype: str, family: int) -> bool:
    """FLASH_ATTN's ``supports_kv_cache_dtype``.  Whether it takes a quantized
    cache depends on the FA version: on family 120 vLLM always runs FA2, which
    takes none (``flash_attn_supports_kv_cache_dtype``, called here with the
    capability reported); elsewhere the version comes from the installed
    flash-attn build, which a CPU box lacks, so only the class's dtype list
    is read there (geometry/backends.py states the assumption)."""
    if family == 120:
        return fa_cls.supports_kv_cache_dtype(kv_cache_dtype)
    return kv_cache_dtype in fa_cls.supported_kv_cache_dtypes


def _sparse_mla_kv_cache_dtype(mla_cls, cache) -> str:
    """What ``MLAAttention.__init__`` does with the cache dtype for a sparse
    MLA layer: the backend must take it (``validate_configuration``'s dtype
    test; on SM12x no other sparse backend is listed), then
    ``_canonicalize_sparse_mla_kv_cache_dtype`` may change it and the layer
    writes the result back to the cache config."""
    from vllm.model_executor.layers.attention.mla_attention import (
        _canonicalize_sparse_mla_kv_cache_dtype,
    )

    requested = cache.cache_dtype
    if requested not in mla_cls.supported_kv_cache_dtypes:
        raise ValueError(f"No valid attention backend found: {mla_cls.get_name()} does not "
                         f"take kv_cache_dtype {requested!r}")
    canonical = _canonicalize_sparse_mla_kv_cache_dtype(mla_cls, requested)
    if canonical != requested:
        cache.cache_dtype = canonical
    return canonical


def _kimi_mla_backend(inputs: GeometryInputs, hf, kv_str: str):
    """The dense MLA backend class for the family (same table as
    geometry/backends.py::dense_mla_backend)."""
    name = B.dense_mla_backend(inputs.capability_family, kv_str, hf.qk_nope_head_dim,
                                 hf.kv_lora_rank + hf.qk_rope_head_dim).name
    module, clsname = {
        "FLASHINFER_MLA": ("flashinfer_mla", "FlashInferMLABackend"),
        "FLASH_ATTN_MLA": ("flashattn_mla", "FlashAttnMLABackend"),
        "FLASHMLA": ("flashmla", "FlashMLABackend"),
        "TRITON_MLA": ("triton_mla", "TritonMLABackend"),
    }[name]
    cls = getattr(_import_kernel_module(f"vllm.v1.attention.backends.mla.{module}"), clsname)
    assert cls.get_name() == name
    return cls


def _kimi_layers(inputs, cfg, mc, hf, ctx, tp, num_spec, model_kv) -> None:
    """KimiLinearModel's attention layers (vllm/models/kimi_k3/nvidia/model.py,
    KimiDecoderLayer): KDA iff ``hf.is_kda_layer(i)``, else the model's own
    dense ``MultiHeadLatentAttention`` (nvidia/mla.py), both at
    ``model.layers.{i}.self_attn``.  Constructors are skipped; the attributes
    their ``get_kv_cache_spec`` reads are set as the constructors would."""
    from vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn import (
        KimiGatedDeltaNetAttention,
    )
    from vllm.models.kimi_k3.nvidia.mla import MultiHeadLatentAttention

    lac = hf.linear_attn_config
    mla_cls = None
    for i in range(hf.num_hidden_layers):
        p = f"model.layers.{i}.self_attn"
        if hf.is_kda_layer(i):
            assert lac["num_heads"] % tp == 0  # as in KimiGatedDeltaNetAttention.__init__
            ctx[p] = _new(
                KimiGatedDeltaNetAttention, prefix=p, tp_size=tp,
                num_heads=lac["num_heads"], head_dim=lac["head_dim"],
                conv_size=lac["short_conv_kernel_size"], num_spec=num_spec,
                model_config=mc, cache_config=cfg.cache_config, vllm_config=cfg,
                speculative_config=cfg.speculative_config, _checkpoint_alignment=None)
            continue
        assert hf.mla_use_nope, "Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only"
        if mla_cls is None:
            mla_cls = _kimi_mla_backend(inputs, hf, model_kv)
        ctx[p] = _new(
            MultiHeadLatentAttention, layer_name=p, kv_cache_dtype=model_kv,
            head_size=hf.kv_lora_rank + hf.qk_rope_head_dim,
            non_causal_multi_token_decode=False, attn_backend=mla_cls,
            kv_sharing_target_layer_name=None, quant_config=None)


def _attention(Attention, AttentionType, backend, name, kv_heads, head_size, kv_str,
               kv_dtype, window, is_draft):
    return _new(Attention, layer_name=name, attn_type=AttentionType.DECODER,
                kv_cache_dtype=kv_str, kv_cache_torch_dtype=kv_dtype,
                sliding_window=window, attn_backend=backend, num_kv_heads=kv_heads,
                head_size=head_size, head_size_v=head_size,
                kv_sharing_target_layer_name=None, is_draft_layer=is_draft)


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _plan(inputs: GeometryInputs, with_drafter: bool, num_spec: int) -> Plan:
    from vllm.config import set_current_vllm_config
    from vllm.platforms.interface import Platform
    from vllm.v1.core import kv_cache_planning as P
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    with _capability(inputs.capability_family):
        try:
            cfg, kind = _build(inputs, with_drafter, num_spec)
        except (AssertionError, ValueError, NotImplementedError) as exc:
            return Plan(None, None, None, None, (), (), None, None, None, None, error=_error(exc))
        cache = cfg.cache_config
        rows: tuple = ()
        try:
            with _model_registry_fallback():
                Platform.update_block_size_for_backend(cfg)
            with set_current_vllm_config(cfg):
                specs = get_kv_cache_spec(cfg)
                layout = _resolve_layout(cfg, specs)
                owners = {n: ("drafter" if n.startswith("drafter.") else "target") for n in specs}
                groups = P.get_kv_cache_groups(cfg, dict(specs))
                final = {}
                for g in groups:
                    gs = g.kv_cache_spec
                    for n in g.layer_names:
                        final[n] = (gs.kv_cache_specs[n]
                                    if isinstance(gs, UniformTypeKVCacheSpecs) else gs)
                rows = _rows(final, owners, specs)
                kvc = P.get_kv_cache_config_from_groups(cfg, groups, inputs.kv_cache_memory_bytes)
                bpb = P._get_kv_cache_bytes_per_block(groups, layout)
            t_rows = [r for r in rows if r.owner == "target" and r.role in ("mla_latent", "attention")]
            grows = []
            for i, g in enumerate(groups):
                gs = g.kv_cache_spec
                layer_specs = [final[n] for n in g.layer_names]
                grows.append(GroupRow(
                    i, type(layer_specs[0]).__name__,
                    tuple(sorted({_role(n, final[n]) for n in g.layer_names})),
                    tuple(g.layer_names), layer_specs[0].block_size,
                    sum(s.page_size_bytes for s in layer_specs),
                    (any(s.is_draft for s in layer_specs)
                     if isinstance(gs, UniformTypeKVCacheSpecs) else gs.is_draft)))
            block_size = cache.block_size
            prefix = _prefix_cache(cfg, kvc)
            return Plan(
                block_size, cache.mamba_page_size_padded, layout.name,
                _path(kind, groups, specs, layout), rows, tuple(grows), bpb,
                kvc.num_blocks, kvc.num_blocks * t_rows[0].block_size,
                t_rows[0].real_page_bytes, prefix_cache=prefix)
        except (AssertionError, ValueError, NotImplementedError) as exc:
            return Plan(cache.block_size, cache.mamba_page_size_padded, None, None, rows,
                          (), None, None, None, None, error=_error(exc))


def _prefix_cache(cfg, kvc) -> PrefixCache:
    """What ``EngineCore._initialize_kv_caches`` resolves for the scheduler
    (vllm/v1/engine/core.py): the scheduler's copy of the config, the cache
    block size set to the smallest prefix-cacheable group block, then
    ``resolve_kv_cache_block_sizes`` and ``resolve_cache_hit_alignment_tokens``.
    Changes ``cfg.cache_config.block_size`` as the engine core does."""
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
    )

    scheduler_cfg = generate_scheduler_kv_cache_config([kvc])
    groups = scheduler_cfg.kv_cache_groups
    if groups:
        participating = [g.kv_cache_spec.block_size for g in groups
                         if g.kv_cache_spec.prefix_cacheable]
        cfg.cache_config.block_size = min(
            participating or [g.kv_cache_spec.block_size for g in groups])
    scheduler_block, hash_block = resolve_kv_cache_block_sizes(scheduler_cfg, cfg)
    alignment = resolve_cache_hit_alignment_tokens(scheduler_cfg, cfg, scheduler_block,
                                                   hash_block)
    enabled = bool(cfg.cache_config.enable_prefix_caching)
    return PrefixCache(enabled=enabled, hash_block_size=hash_block,
                       scheduler_block_size=scheduler_block, hit_alignment_tokens=alignment,
                       can_hit=can_hit(enabled, alignment, cfg.model_config.max_model_len))


def _resolve_layout(cfg, specs):
    """``resolve_kv_cache_layout`` over the attention backends' layouts, as
    the engine core does before planning."""
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )

    names = [l.name for l in get_supported_kv_cache_layouts(get_current_attn_backends(cfg))]
    cfg.cache_config.kv_cache_layout = None
    return resolve_kv_cache_layout(cfg, [names], specs.values())


def _path(kind, groups, specs, layout) -> str:
    from vllm.v1.core import kv_cache_planning as P
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs

    if P.is_kv_cache_spec_uniform(specs):
        return "uniform"
    if UniformTypeKVCacheSpecs.from_specs(specs) is not None:
        return "uniform_type"
    if layout.is_block_outermost and len({s.page_size_bytes for s in specs.values()}) > 1:
        return "packed"
    return "unified"


def _role(name: str, spec) -> str:
    from vllm.v1.kv_cache_interface import (
        CircularBufferSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
    )

    if isinstance(spec, MambaSpec):
        return "kda" if name.endswith(".self_attn") else "gdn"
    if isinstance(spec, CircularBufferSpec):
        return "kpool_tail"
    if isinstance(spec, MLAAttentionSpec):
        return "sparse_indexer" if spec.cache_role.value == "indexer" else "mla_latent"
    if isinstance(spec, SlidingWindowSpec):
        return "sliding_window"
    return "attention"


def _rows(final: dict, owners: dict, order: dict) -> tuple:
    from vllm.v1.kv_cache_interface import AttentionSpec, MambaSpec

    rows = []
    for name in order:  # vLLM's layer order
        s = final[name]
        if isinstance(s, MambaSpec):
            dtype = "/".join(str(d).replace("torch.", "") for d in s.dtypes)
            rows.append(LayerRow(name, owners[name], _role(name, s), type(s).__name__,
                                   s.block_size, 0, 0, dtype, 0, s.real_page_size_bytes,
                                   s.page_size_bytes, s.page_size_bytes != s.real_page_size_bytes,
                                   s.get_block_stride_alignment()))
            continue
        assert isinstance(s, AttentionSpec)
        tps = int(s.tokens_per_state) if s.tokens_per_state > 0 else 1
        bpt = s.num_heads * s.state_content_size_bytes // tps
        rows.append(LayerRow(
            name, owners[name], _role(name, s), type(s).__name__, s.block_size,
            s.num_kv_heads, s.head_size, str(s.dtype).replace("torch.", ""), bpt,
            s.real_page_size_bytes, s.page_size_bytes,
            s.page_size_bytes != s.real_page_size_bytes, s.get_block_stride_alignment()))
    return tuple(rows)


def blocks_per_request(inputs: GeometryInputs) -> list[tuple[str, int, int]]:
    """(spec class, block size, blocks) per KV-cache group of the with-drafter
    plan: the blocks one request of ``max_model_len`` tokens draws from the
    shared pool, as ``get_max_concurrency_for_kv_cache_config`` counts them
    (``cdiv(max_memory_usage_bytes, page_size_bytes)`` of the scheduler's
    group spec)."""
    from vllm.config import set_current_vllm_config
    from vllm.platforms.interface import Platform
    from vllm.utils.math_utils import cdiv
    from vllm.v1.core import kv_cache_planning as P
    from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    with _capability(inputs.capability_family):
        cfg, _ = _build(inputs, inputs.has_drafter, inputs.num_speculative_tokens)
        with _model_registry_fallback():
            Platform.update_block_size_for_backend(cfg)
        with set_current_vllm_config(cfg):
            specs = get_kv_cache_spec(cfg)
            _resolve_layout(cfg, specs)
            groups = P.get_kv_cache_groups(cfg, dict(specs))
            kvc = P.get_kv_cache_config_from_groups(cfg, groups, inputs.kv_cache_memory_bytes)
            out = []
            for g in generate_scheduler_kv_cache_config([kvc]).kv_cache_groups:
                spec = g.kv_cache_spec
                out.append((type(spec).__name__, spec.block_size,
                            cdiv(spec.max_memory_usage_bytes(cfg), spec.page_size_bytes)))
    return out


def plan_with_vllm(inputs: GeometryInputs) -> GeometryReport:
    """The geometry the imported vLLM builds for ``inputs`` (its own
    behaviour: ``inputs.vllm_behaviour`` is ignored here)."""
    with_d = _plan(inputs, inputs.has_drafter, inputs.num_speculative_tokens)
    if inputs.has_drafter:
        without = _plan(inputs, False, 0)
        same = _plan(inputs, False, inputs.num_speculative_tokens)
    else:
        without = same = with_d
    sim = simulate(inputs)  # descriptive fields (backend names, dtypes) only
    return dc_replace(sim, with_drafter=with_d, without_drafter=without,
                      target_only_same_spec=same, notes=("planned by the imported vLLM",))


def compare_reports(sim: GeometryReport, vllm: GeometryReport) -> tuple[str, ...]:
    """Field-by-field differences (empty when they agree)."""
    return record.compare(record.comparable(sim), record.comparable(vllm))


# --------------------------------------------------------------------------
# The engine-core path: vLLM's ``EngineCore._initialize_kv_caches`` on specs
# built from explicit GLM-5.3 + DFlash2 parameters.
#
# What is vLLM's own code here, and what stands in for it:
#
# * The drafter's KV spec comes from the real ``Attention.get_kv_cache_spec``
#   (the place where stock vLLM picks the drafter's sliding-window block size
#   and the overlay series fits it), customised by the real
#   ``customize_attention_spec`` with the drafter's backend (FLASH_ATTN: vLLM's
#   choice for a non-causal DFlash drafter on SM10x), collected by the V2
#   runner's ``get_kv_cache_spec``.
# * The target's specs (MLA latent, kpool indexer, kpool tail ring, KDA state)
#   are built with vLLM's spec classes and ``MambaStateShapeCalculator`` /
#   ``MambaStateDtypeCalculator`` exactly as the GLM-5.3 layers' own
#   ``get_kv_cache_spec`` bodies build them (their constructors need CUDA);
#   the KDA prefill kernel (``kda_prefill_backend``) decides the state's
#   prefill checkpoint alignment.
# * The hybrid block size B follows ``Platform._align_hybrid_block_size``'s
#   formula (the indexer backend's smallest kernel block, at least 128 for MLA).
# * Grouping, unification, block counts, the global block size and the hash
#   and cache-hit block sizes run through vLLM's real
#   ``EngineCore._initialize_kv_caches``. The GPU workers are replaced by a
#   stand-in executor that returns the per-rank specs and the available KV
#   memory; nothing in vLLM's planning is replaced.
#
# ``plan_with_vllm`` drives more of vLLM (model config, platform alignment,
# every layer's own ``get_kv_cache_spec``) from a gate input; this path is the
# one that covers what only the engine core does (the global block size after
# grouping, the scheduler's view) and the patched tree's log lines.
#
# Command line (``sys.path`` must start with the vLLM tree under test, e.g.
# ``PYTHONPATH=TREE:REPO``)::
#
#     python -m geometry.oracle --engine-core '[{"tp": 1, "num_spec": 7, ...}, ...]'
#
# prints one ``OVERLAY_PLAN {json}`` line (``engine_core_summary``) per case.

ENGINE_CORE_DEFAULTS = {
    # GLM-5.3-Flash target (transformers Glm5NextTextConfig defaults).
    "num_hidden_layers": 45,
    "mla_layer_ids": list(range(3, 45, 4)),
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 0,
    "linear_num_heads": 64,
    "linear_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "index_head_dim": 128,
    "index_kpool": 16,
    "max_model_len": 1048576,
    # DFlash2 drafter (BF16).
    "draft_num_layers": 5,
    "draft_num_kv_heads": 8,
    "draft_head_dim": 128,
    "draft_sliding_window": 2048,
    "draft_kv_dtype": "auto",  # bf16
    # Runtime.
    "tp": 1,
    "num_spec": 7,
    "kv_cache_dtype": "fp8",
    "with_drafter": True,
    "kv_memory_gib": 200,
    "max_num_batched_tokens": 8192,
    # "none": prefix caching off (the KDA state is not checkpointed);
    # "align": prefix caching on, what vLLM serves a hybrid model with by
    # default (MambaModelConfig.verify_and_update_config).
    "mamba_cache_mode": "none",
    # The KDA chunked-prefill kernel ("flashkda" on SM90/SM10x/SM12x for bf16,
    # head_dim 128 and a bounded gate; else "triton"): it decides whether the
    # KDA state can be checkpointed inside a prefill chunk.
    "kda_prefill_backend": "triton",
}


def engine_core_plan(params: dict):
    """vLLM's KV cache configuration for ``params`` (keys of
    ``ENGINE_CORE_DEFAULTS``), planned by ``EngineCore._initialize_kv_caches``.

    Returns a namespace: ``vllm_config``, ``scheduler`` (the scheduler's KV
    cache config, what ``EngineCore._initialize_kv_caches`` returns, with the
    hash block size and cache-hit alignment set on it), ``workers`` (the
    per-rank configs), ``target_block_size`` (the hybrid block B) and
    ``target_mla_page`` (the MLA latent page at B).
    """
    from types import SimpleNamespace

    import torch

    from vllm.config import (
        CacheConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )
    from vllm.model_executor.layers.attention import Attention
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )
    from vllm.utils.math_utils import cdiv
    from vllm.v1.attention.backend import AttentionType
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.kv_cache_interface import (
        MambaSpec,
        MLAAttentionSpec,
        get_kv_quant_mode,
    )

    p = dict(ENGINE_CORE_DEFAULTS, **params)
    # num_spec sizes the target's own state (KDA conv, kpool tail ring) with or
    # without drafter layers, so "no drafter" compares the same target geometry.
    tp, num_spec = p["tp"], p["num_spec"]

    # --- configs: real dataclasses, only fields planning reads are filled ---
    model_config = object.__new__(ModelConfig)
    for k, v in {
        "max_model_len": p["max_model_len"],
        "original_max_model_len": p["max_model_len"],
        "dtype": torch.bfloat16,
    }.items():
        object.__setattr__(model_config, k, v)

    class _Info:  # registry answer for Glm5NextForCausalLM
        supports_kv_cache_grouping = False

    object.__setattr__(model_config, "_model_info", _Info())
    cache_config = CacheConfig(cache_dtype=p["kv_cache_dtype"])
    cache_config.kv_cache_layout = None
    if p["mamba_cache_mode"] == "align":
        # MambaModelConfig.verify_and_update_config with prefix caching on.
        cache_config.enable_prefix_caching = True
        cache_config.mamba_cache_mode = "align"
    else:
        cache_config.enable_prefix_caching = False
    vllm_config = VllmConfig(
        cache_config=cache_config,
        parallel_config=ParallelConfig(tensor_parallel_size=1),
        scheduler_config=SchedulerConfig(
            max_model_len=p["max_model_len"],
            max_num_batched_tokens=p["max_num_batched_tokens"],
            is_encoder_decoder=False,
        ),
    )
    object.__setattr__(vllm_config, "model_config", model_config)
    vllm_config.parallel_config.tensor_parallel_size = tp
    if p["with_drafter"]:
        spec_config = object.__new__(SpeculativeConfig)
        for k, v in {
            "method": "dflash",
            "num_speculative_tokens": num_spec,
            "disable_eagle_block_drop": False,
            "num_speculative_tokens_per_batch_size": None,
            "draft_model_config": None,
        }.items():
            object.__setattr__(spec_config, k, v)
        object.__setattr__(vllm_config, "speculative_config", spec_config)

    # --- hybrid block size B (Platform._align_hybrid_block_size formula) ---
    mla_bpt = MLAAttentionSpec(
        block_size=1,
        num_kv_heads=1,
        head_size=p["kv_lora_rank"] + p["qk_rope_head_dim"],
        dtype=torch.uint8 if p["kv_cache_dtype"].startswith("fp8") else torch.bfloat16,
        cache_dtype_str=p["kv_cache_dtype"],
        kv_quant_mode=get_kv_quant_mode(p["kv_cache_dtype"]),
    ).page_size_bytes
    kda_shapes = MambaStateShapeCalculator.kda_state_shape(
        tp,
        p["linear_num_heads"],
        p["linear_head_dim"],
        conv_kernel_size=p["linear_conv_kernel_dim"],
        num_spec=num_spec,
    )
    kda_dtypes = MambaStateDtypeCalculator.kda_state_dtype(torch.bfloat16, "auto", "auto")
    from vllm.model_executor.layers.mamba.kda_checkpoint import (
        kda_prefill_checkpoint_alignment,
    )

    # Glm5NextLinearAttention.get_kv_cache_spec adds these to MambaBase's spec.
    kda_alignment = kda_prefill_checkpoint_alignment(p["kda_prefill_backend"])
    mamba_page = MambaSpec(shapes=kda_shapes, dtypes=kda_dtypes, block_size=-1).page_size_bytes
    # Indexer backend (first non-SSM backend in layer order): 32-state pages.
    align = max(32 * p["index_kpool"], cache_config.block_size, 128)
    block = align * cdiv(mamba_page, align * mla_bpt)
    cache_config.block_size = block
    cache_config.mamba_block_size = block
    cache_config.mamba_page_size_padded = (
        block * mla_bpt if block * mla_bpt != mamba_page else None
    )

    # --- per-rank layer specs, collected by the V2 runner's own function ---
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention
    from vllm.utils.math_utils import next_power_of_2
    from vllm.v1.attention.backends.mla.indexer import (
        Glm5NextIndexerBackend,
        KpoolTailBackend,
    )
    from vllm.v1.kv_cache_interface import CircularBufferSpec, SparseCacheRole
    from vllm.v1.worker.utils import customize_attention_spec
    from vllm.v1.attention.backends.mla.flashinfer_mla_sparse import (
        FlashInferMLASparseTRTLLMBackend,
    )
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    def bare(cls, **attrs):
        """A layer whose CUDA-building constructor is skipped; only the
        attributes its get_kv_cache_spec / get_attn_backend read are set."""
        layer = object.__new__(cls)
        torch.nn.Module.__init__(layer)
        for k, v in attrs.items():
            setattr(layer, k, v)
        return layer

    forward_context = vllm_config.compilation_config.static_forward_context
    kv_dtype = p["kv_cache_dtype"]
    order: list = []
    mamba_specs: dict = {}  # specs not collected from layer objects
    with set_current_vllm_config(vllm_config):
        for i in range(p["num_hidden_layers"]):
            pre = f"model.layers.{i}"
            if i not in p["mla_layer_ids"]:
                mamba_specs[f"{pre}.self_attn"] = MambaSpec(
                    shapes=tuple(kda_shapes),
                    dtypes=kda_dtypes,
                    block_size=cache_config.mamba_block_size,
                    page_size_padded=cache_config.mamba_page_size_padded,
                    mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
                    mamba_cache_mode=cache_config.mamba_cache_mode,
                    num_speculative_blocks=num_spec,
                    num_prefill_checkpoint_blocks=int(kda_alignment is not None),
                    prefill_checkpoint_alignment=kda_alignment,
                )
                order.append(f"{pre}.self_attn")
                continue
            forward_context[f"{pre}.self_attn.attn"] = bare(
                MLAAttention,
                kv_cache_dtype=kv_dtype,
                head_size=p["kv_lora_rank"] + p["qk_rope_head_dim"],
                sliding_window=None,
                topk_buffer_width=p.get("index_topk", 2048),
                indexer=object(),
                non_causal_multi_token_decode=False,
                attn_backend=FlashInferMLASparseTRTLLMBackend,
                is_draft_layer=False,
            )
            # Glm5NextIndexerCache / Glm5NextTailCache.get_kv_cache_spec (their
            # module imports the multimodal model, which needs torchvision),
            # customised by their backends as the runner does.
            kpool = p["index_kpool"]
            mamba_specs[f"{pre}.self_attn.indexer.k_cache"] = customize_attention_spec(
                Glm5NextIndexerBackend,
                MLAAttentionSpec(
                    block_size=cache_config.block_size,
                    num_kv_heads=1,
                    max_tp_shards=1,
                    head_size=p["index_head_dim"] + p["index_head_dim"] // 128 * 4,
                    dtype=torch.uint8,
                    cache_role=SparseCacheRole.INDEXER,
                    tokens_per_state=kpool,
                ),
            )
            ring = kpool * next_power_of_2(cdiv(kpool + num_spec, kpool))
            mamba_specs[f"{pre}.self_attn.indexer.tail_cache"] = customize_attention_spec(
                KpoolTailBackend,
                CircularBufferSpec(
                    block_size=ring,
                    num_kv_heads=2,
                    head_size=p["index_head_dim"],
                    head_size_v=0,
                    dtype=torch.bfloat16,
                    dcp_sharded=False,
                ),
            )
            order += [
                f"{pre}.self_attn.attn",
                f"{pre}.self_attn.indexer.k_cache",
                f"{pre}.self_attn.indexer.tail_cache",
            ]
        if p["with_drafter"]:
            dtp = max(1, p["draft_num_kv_heads"] // tp)
            for j in range(p["draft_num_layers"]):
                name = f"draft_model.model.layers.{j}.self_attn.attn"
                forward_context[name] = bare(
                    Attention,
                    attn_type=AttentionType.DECODER,
                    kv_cache_dtype=p["draft_kv_dtype"],
                    kv_cache_torch_dtype=(
                        torch.bfloat16 if p["draft_kv_dtype"] == "auto" else torch.uint8
                    ),
                    sliding_window=p["draft_sliding_window"],
                    attn_backend=FlashAttentionBackend,
                    num_kv_heads=dtp,
                    head_size=p["draft_head_dim"],
                    head_size_v=p["draft_head_dim"],
                    kv_sharing_target_layer_name=None,
                    # Set by the speculator once the drafter is loaded.
                    is_draft_layer=True,
                )
                order.append(name)
        collected = get_kv_cache_spec(vllm_config)
    collected.update(mamba_specs)
    specs = {name: collected[name] for name in order}

    # --- run EngineCore._initialize_kv_caches with a stand-in executor ---
    available = int(p["kv_memory_gib"] * (1 << 30))

    class _Workers:
        """Stands in for the GPU workers: reports specs and free memory."""

        captured = None

        def get_kv_cache_specs(self):
            return [dict(specs) for _ in range(tp)]

        def get_supported_kv_cache_layouts(self):
            from vllm.v1.attention.backends.mla.indexer import KpoolTailBackend

            # The kpool tail backend is the most restrictive of the model's
            # backends: block-outermost layouts only.
            names = [x.name for x in KpoolTailBackend.supported_kv_cache_layouts()]
            return [names for _ in range(tp)]

        def set_kv_cache_layout(self, *args):
            pass

        def determine_available_memory(self):
            return [available] * tp

        def collective_rpc(self, *args, **kwargs):
            return [None] * tp

        def initialize_from_config(self, configs):
            _Workers.captured = configs

        def compile_or_warm_up_model(self):
            pass

    core = object.__new__(EngineCore)
    core.model_executor = _Workers()
    core.available_gpu_memory_for_kv_cache = -1
    scheduler = EngineCore._initialize_kv_caches(core, vllm_config)
    return SimpleNamespace(
        vllm_config=vllm_config,
        scheduler=scheduler,
        workers=_Workers.captured,
        target_block_size=block,
        target_mla_page=block * mla_bpt,
    )


def engine_core_summary(params: dict) -> dict:
    """What ``engine_core_plan(params)`` planned, as JSON-able numbers: the
    bytes per block, number of blocks, the groups and the global, hash and
    cache-hit block sizes (and the imported vLLM's file)."""
    built = engine_core_plan(params)
    cache_config = built.vllm_config.cache_config
    cfg = built.workers[0]

    from vllm.v1.core.kv_cache_planning import _get_kv_cache_bytes_per_block

    bytes_per_block = _get_kv_cache_bytes_per_block(
        cfg.kv_cache_groups, cache_config.get_resolved_kv_cache_layout()
    )
    groups = []
    draft_padded = False
    for g in cfg.kv_cache_groups:
        from vllm.v1.kv_cache_interface import iter_layer_specs

        layer_specs = list(iter_layer_specs(g.kv_cache_spec))
        is_draft = all(n.startswith("draft_model.") for n in g.layer_names)
        if is_draft:
            draft_padded |= any(
                getattr(s, "page_size_padded", None) is not None for s in layer_specs
            )
        groups.append(
            {
                "layers": len(g.layer_names),
                "type": type(layer_specs[0]).__name__,
                "block_size": g.kv_cache_spec.block_size,
                "page_bytes": layer_specs[0].page_size_bytes,
                "group_bytes": sum(s.page_size_bytes for s in layer_specs),
                "draft": is_draft,
                "is_eagle_group": g.is_eagle_group,
            }
        )
    return {
        "target_block_size": built.target_block_size,
        "target_mla_page": built.target_mla_page,
        "bytes_per_block": bytes_per_block,
        "num_blocks": cfg.num_blocks,
        "global_block_size": cache_config.block_size,
        "mamba_cache_mode": cache_config.mamba_cache_mode,
        "hash_block_size": built.scheduler.hash_block_size,
        "cache_hit_alignment_tokens": built.scheduler.cache_hit_alignment_tokens,
        "layout": cache_config.kv_cache_layout,
        "draft_padded": draft_padded,
        "groups": groups,
        "vllm_file": sys.modules["vllm"].__file__,
    }


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m geometry.oracle",
                                 description="Plan with the imported vLLM's engine core.")
    ap.add_argument("--engine-core", required=True, metavar="CASES",
                    help="a JSON object or list of objects (keys of ENGINE_CORE_DEFAULTS)")
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    logging.basicConfig(level=logging.INFO)
    cases = json.loads(args.engine_core)
    for case in cases if isinstance(cases, list) else [cases]:
        print("OVERLAY_PLAN " + json.dumps(engine_core_summary(case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
