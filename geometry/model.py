"""The model a run plans: the target's layers (built per architecture by
model_glm5next / model_kimi_linear / model_qwen3_next) followed by the
drafter's, in vLLM's registration order, with their KV dtypes and the facts
the block-size alignment reads (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from . import backends as B
from . import model_glm5next, model_kimi_linear, model_qwen3, model_qwen3_next
from .drafter import build_drafter
from .errors import BadInput
from .inputs import GeometryInputs
from .kv_spec import DTYPE_BYTES, SUPPORTED_KV_DTYPES, SimulatedError
from .model_config import is_hybrid, target_kind, text_config
from .model_parts import Layer, TargetSettings, kv_dtype_name, required

TARGET_BUILDERS = {
    "glm5next": model_glm5next.build_target,
    "kimi_linear": model_kimi_linear.build_target,
    "qwen3_next": model_qwen3_next.build_target,
    "qwen3": model_qwen3.build_target,
}


def resolve_model_dtype(cfg: Mapping[str, Any]) -> str:
    tc = text_config(cfg)
    d = tc.get("dtype") or tc.get("torch_dtype") or cfg.get("dtype") or cfg.get("torch_dtype")
    d = str(d or "bfloat16").replace("torch.", "")
    if d not in ("bfloat16", "float16", "float32"):
        raise BadInput(f"model dtype {d!r} not modelled")
    return d


def resolve_kv_dtypes(inputs: GeometryInputs, kind: str) -> tuple[str, str | None]:
    """Cache-dtype *strings* the target and drafter layers run.

    1. ``Glm5NextModelConfig``: on family 100 a GLM-5.3 target at "auto" runs
       fp8 and a non-MTP drafter without its own dtype keeps "auto".
    2. ``MLAAttention.__init__`` (``_canonicalize_sparse_mla_kv_cache_dtype``):
       the sparse MLA backend may run another format and writes it back to
       ``cache_config.cache_dtype`` (family 120: fp8_ds_mla, see
       geometry/backends.py).
    3. A drafter without its own dtype takes ``cache_config.cache_dtype`` as it
       is when the drafter loads, after the target: the rewritten one.
    """
    target = inputs.kv_cache_dtype
    drafter = inputs.drafter_kv_cache_dtype if inputs.has_drafter else None
    for what, kv in (("kv_cache_dtype", target), ("drafter_kv_cache_dtype", drafter)):
        if kv is not None and kv not in SUPPORTED_KV_DTYPES:
            raise BadInput(f"{what} {kv!r} not modelled (supported: {SUPPORTED_KV_DTYPES})")
    tc = text_config(inputs.target_config)
    sparse = kind == "glm5next" and tc.get("index_topk") is not None
    if sparse and target == "auto" and inputs.capability_family == 100:
        target = "fp8"
        if inputs.has_drafter and drafter is None:  # method "dflash" != "mtp"
            drafter = "auto"
    if sparse and inputs.capability_family in B.SPARSE_MLA_FAMILIES:
        backend = B.sparse_mla_backend(inputs.capability_family)
        if not backend.takes_kv_cache_dtype(target):
            why = (f"{backend.name} does not take kv_cache_dtype {target!r} (it takes "
                   f"{', '.join(backend.kv_cache_dtypes)})")
            if inputs.capability_family == 120:  # vLLM lists no other sparse MLA backend
                raise SimulatedError("ValueError", f"No valid attention backend found: {why}")
            raise BadInput(f"{why}; vLLM would pick another sparse MLA backend (not modelled)")
        target = B.canonical_sparse_mla_kv_cache_dtype(backend, target)
    if inputs.has_drafter and drafter is None:
        drafter = target
    return target, drafter


@dataclass(frozen=True)
class Model:
    """Layers (in vLLM's registration order) and model-level facts."""

    kind: str
    layers: tuple[Layer, ...]
    max_model_len: int
    model_dtype: str
    kv_target: str  # cache-dtype strings the layers run
    kv_drafter: str | None
    use_mla: bool
    head_size: int
    num_kv_heads: int
    mamba_page: int
    drafter_backend: B.Backend | None = None
    drafter_error: SimulatedError | None = None

    def attn_page_1_token(self) -> int:
        """The target attention page of one token (``_align_hybrid_block_size``)."""
        t_bytes = DTYPE_BYTES[kv_dtype_name(self.kv_target, self.model_dtype)]
        if self.use_mla:
            return self.head_size * t_bytes
        return self.num_kv_heads * 2 * self.head_size * t_bytes

    def prefill_checkpoint_alignment(self) -> int | None:
        """``get_mamba_prefill_checkpoint_alignment`` in "align" mode: the LCM
        of the mamba layers' ``get_prefill_checkpoint_alignment``.  KDA layers
        (GLM-5.3, Kimi Linear) export none (``MambaBase``'s None).  Qwen3-Next's
        GDN layers export 64 when vLLM picks FlashInfer's GDN prefill kernel,
        which depends on the CUDA runtime and FlashInfer build of the image."""
        if self.kind == "qwen3_next":
            raise BadInput("mamba_cache_mode 'align' for Qwen3-Next (GDN) targets is not "
                           "modelled (the prefill checkpoint alignment depends on the GDN "
                           "prefill kernel vLLM picks at run time)")
        return None

    def non_ssm_backends(self) -> list[B.Backend]:
        """The attention backends in layer order, each once."""
        out: list[B.Backend] = []
        for layer in self.layers:
            if not layer.backend.is_ssm and layer.backend not in out:
                out.append(layer.backend)
        return out

    def target_only(self) -> Model:
        """The same model without the drafter's layers (same num_spec: nothing
        of the target depends on the drafter)."""
        return replace(self, layers=tuple(l for l in self.layers if l.owner == "target"),
                       kv_drafter=None, drafter_backend=None, drafter_error=None)


def build_model(inputs: GeometryInputs, with_drafter: bool, num_spec: int) -> Model:
    kind = target_kind(inputs.target_config)
    if inputs.capability_family == B.CPU_FAMILY and (is_hybrid(kind) or inputs.has_drafter):
        raise BadInput(f"on the CPU platform (no GPU) only a dense target without a drafter is modelled, "
                       f"not {kind}{' with a drafter' if inputs.has_drafter else ''}")
    tc = text_config(inputs.target_config)
    model_dtype = resolve_model_dtype(inputs.target_config)
    kv_target, kv_drafter = resolve_kv_dtypes(inputs, kind)
    if not with_drafter:
        kv_drafter = None
    max_model_len = inputs.max_model_len or int(tc.get("max_position_embeddings", 0) or 0) or 1
    settings = TargetSettings(
        tc=tc, num_layers=int(required(tc, "num_hidden_layers")),
        layer_types=tuple(tc.get("layer_types") or ()),
        tensor_parallel_size=inputs.tensor_parallel_size,
        capability_family=inputs.capability_family, num_spec=num_spec,
        model_dtype=model_dtype, kv_cache_dtype=kv_target, max_model_len=max_model_len)
    target = TARGET_BUILDERS[kind](settings)
    model = Model(kind, target.layers, max_model_len, model_dtype, kv_target, kv_drafter,
                  target.use_mla, target.head_size, target.num_kv_heads, target.mamba_page)
    if with_drafter and inputs.drafter_config is not None:
        drafter = build_drafter(inputs, kv_drafter, model_dtype)
        model = replace(model, layers=model.layers + drafter.layers,
                        drafter_backend=drafter.backend, drafter_error=drafter.error)
    return model
