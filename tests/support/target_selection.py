"""vLLM's own attention-backend selector asked which backend the target's attention layers of a gate input get,
and the simulator's choice for the same layers: what tests/agreement/test_backend_agreement.py compares.

The oracle (geometry/oracle) builds the target's layers on the simulator's backend table and lets vLLM's selector
pick the drafter's only; here the selector picks the target's too, asked as the layers' constructors ask it on the
serving GPU (``serving_platform``: ``CudaPlatform``'s selection on the family's capability, vLLM's ``CpuPlatform``
for family 0), from the ``VllmConfig`` the oracle builds for the input (its config hooks applied: GLM-5.3's fp8
cache on SM10x):

* full attention (Qwen3, Qwen3-MoE, Qwen3-Next): vLLM's ``Attention`` constructor itself asks
  ``get_attn_backend`` (the oracle's ``attention_layer`` without a backend);
* MLA (Kimi Linear's dense NoPE MLA) and sparse MLA (GLM-5.3): ``get_attn_backend`` with the arguments
  ``MLAAttention.__init__`` (under GLM's ``MultiHeadLatentAttentionWrapper``) and Kimi's
  ``MultiHeadLatentAttention.__init__`` pass it, whose constructors need CUDA kernels and the served TP group:
  head size ``kv_lora_rank + qk_rope_head_dim``, the model dtype, the cache dtype, ``use_mla``, ``use_sparse``
  (GLM: ``index_topk`` set), the heads per rank.

A choice this host cannot make as the serving GPU would is marked ``host_dependent``: a candidate vLLM weighs before
settling is refused here only for what a GPU host has and this one lacks (``HOST_PROBES``: a kernel probe, or a
module that does not import without CUDA). The selection then says which backends the GPU host may pick
(``possible``): the simulator's choice must be one of them. docs/gate.md ("Who picks the backends") gives vLLM's lines.

Each distinct question (``TargetAsk``: everything the selector reads for these layers) is asked once per process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from geometry.errors import BadInput
from geometry.image_contract import Role
from geometry.kv.backends import CPU_FAMILY
from geometry.kv.kv_spec import SimulatedError
from geometry.model.inputs import GeometryInputs
from geometry.model.model import build_model

# The target layers whose backend vLLM's selector picks (the indexer's and the kpool tail's are the model's own).
SELECTED_ROLES = ("attention", "mla_latent")

# Reasons a candidate is refused on this CPU host that a GPU host of the same wheel would not give.
HOST_PROBES = tuple(
    re.compile(p)
    for p in (
        r"not supported on this device",  # fa_utils.flash_attn_supports_mla: current_platform.is_cuda()
        r"vllm\._flashmla(_extension)?_C is not available",  # ops/flashmla.py: the compiled FlashMLA kernels
        r"requires FlashInfer",  # utils/flashinfer.py: FlashInfer's API probed in the installed package
        r"package is not installed",  # TOKENSPEED_MLA: its kernel package
        r"^(ImportError|OSError|ModuleNotFoundError): ",  # CudaPlatform.get_valid_backends: class unavailable
        r"Torch not compiled with CUDA enabled",  # a candidate's module needs CUDA at import
    )
)


@dataclass(frozen=True)
class TargetAsk:
    """What vLLM's selector reads for the target's attention layers of one gate input."""

    family: int
    role: str  # "attention" (full attention) or "mla_latent" (MLA, sparse or dense)
    head_size: int
    num_heads: int | None  # per rank, as MLA's constructors pass it (full attention passes none)
    model_dtype: str
    kv_cache_dtype: str  # the cache config's, as the model's config hook left it
    user_block_size: int | None  # --block-size (the selector reads it only when the user gave it)
    use_sparse: bool
    qk_nope_head_dim: int | None  # FLASHINFER_MLA's supports_combination reads it from the model config


@dataclass(frozen=True)
class Selection:
    backend: str | None  # the backend's name; None: vLLM refuses (error)
    error: str | None = None  # "Type: message", as vLLM raised it
    # Why this host cannot answer as the GPU would (None: it can, and backend / error are the GPU's answer) ...
    host_dependent: str | None = None
    # ... and then the backends vLLM may pick on the GPU, in its order: each candidate refused here only for what
    # this host lacks, up to the first one valid here.
    possible: tuple[str, ...] = ()
    # The reasons vLLM's candidates are refused for on the GPU's capability, by name (a GPU family's only).
    refused: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def refuses(self, backend: str | None, field: str) -> bool:
        """vLLM refuses ``backend`` for ``field`` (its "<field> not supported")."""
        return f"{field} not supported" in dict(self.refused).get(backend, ())


_ASKED: dict[TargetAsk, Selection] = {}


def simulator_target_backend(inputs: GeometryInputs) -> tuple[str | None, str | None]:
    """(backend name, None) the simulator gives the target's attention layers, or (None, its refusal "Type:
    message"); BadInput where the simulator does not model the input."""
    try:
        model = build_model(inputs, False, 0)
    except SimulatedError as exc:
        return None, str(exc)
    names = {
        layer.backend.name for layer in model.layers if layer.owner is Role.TARGET and layer.role in SELECTED_ROLES
    }
    if len(names) != 1:
        raise BadInput(f"the target's attention layers run {sorted(names)}, not one backend")
    return names.pop(), None


def vllm_target_selection(inputs: GeometryInputs) -> tuple[TargetAsk, Selection]:
    """What vLLM's selector gives the target's attention layers of ``inputs``, and the question it answered."""
    from geometry.oracle.serving_platform import serving_platform
    from geometry.oracle.vllm_config import build_vllm_config

    with serving_platform(inputs.capability_family, inputs.cpu_avx512_bf16) as platform:
        cfg, hf = build_vllm_config(inputs, False, 0)
        ask = _ask(inputs, cfg, hf)
        if ask not in _ASKED:
            _ASKED[ask] = _select(platform, ask, inputs, cfg)
    return ask, _ASKED[ask]


def _ask(inputs: GeometryInputs, cfg, hf) -> TargetAsk:
    mc, cache = cfg.model_config, cfg.cache_config
    mla = inputs.target.kind in ("glm5next", "kimi_linear")
    return TargetAsk(
        family=inputs.capability_family,
        role="mla_latent" if mla else "attention",
        head_size=hf.kv_lora_rank + hf.qk_rope_head_dim if mla else mc.get_head_size(),
        num_heads=hf.num_attention_heads // inputs.tensor_parallel_size if mla else None,
        model_dtype=str(mc.dtype).removeprefix("torch."),
        kv_cache_dtype=cache.cache_dtype,
        user_block_size=cache.block_size if cache.user_specified_block_size else None,
        use_sparse=inputs.target.kind == "glm5next" and getattr(hf, "index_topk", None) is not None,
        qk_nope_head_dim=hf.qk_nope_head_dim if mla else None,
    )


def _select(platform, ask: TargetAsk, inputs: GeometryInputs, cfg) -> Selection:
    """Ask vLLM's selector (its per-process cache cleared first) and judge whether this host answers for the GPU."""
    from vllm.config import set_current_vllm_config

    from geometry.oracle.backend_selection import clear_selection_cache
    from geometry.oracle.cpu_shims import patched

    asked: list = []
    real = platform.get_attn_backend_cls

    def recording(selected_backend, attn_selector_config, num_heads=None):
        asked.append((attn_selector_config, num_heads))
        return real(selected_backend, attn_selector_config, num_heads)

    clear_selection_cache()
    with patched(platform, "get_attn_backend_cls", staticmethod(recording)), set_current_vllm_config(cfg):
        try:
            selection = Selection(_layer_backend(ask, inputs, cfg).get_name())
        except Exception as exc:  # noqa: BLE001 - vLLM's refusal (ValueError) or a module this host cannot import
            selection = Selection(None, f"{type(exc).__name__}: {exc}")
        weighed = [] if ask.family == CPU_FAMILY or not asked else _candidates(platform, *asked[0])
    clear_selection_cache()
    host, possible = _host_dependence(weighed)
    if not asked and selection.error and _host_probe(selection.error):  # it failed before the platform chose
        host = selection.error
    refused = tuple((name, tuple(reasons)) for name, reasons in weighed if reasons)
    return Selection(selection.backend, selection.error, host, possible, refused)


def _layer_backend(ask: TargetAsk, inputs: GeometryInputs, cfg):
    """The backend class the target's first attention layer's constructor gets from vLLM's selector."""
    import torch
    from vllm.utils.torch_utils import set_default_torch_dtype
    from vllm.v1.attention.selector import get_attn_backend

    from geometry.oracle.layer_objects import attention_layer

    mc = cfg.model_config
    with set_default_torch_dtype(mc.dtype):
        if ask.role == "attention":
            layer = attention_layer(
                "model.layers.0.self_attn.attn",
                mc.get_num_attention_heads(cfg.parallel_config),
                mc.get_num_kv_heads(cfg.parallel_config),
                ask.head_size,
                cfg.cache_config,
                None,
                mc.dtype,
            )
            return layer.attn_backend
        return get_attn_backend(
            ask.head_size,
            torch.get_default_dtype(),
            ask.kv_cache_dtype,
            use_mla=True,
            use_sparse=ask.use_sparse,
            num_heads=ask.num_heads,
            has_sliding_window=False,
        )


def _candidates(platform, attn_selector_config, num_heads) -> list[tuple[str, list[str]]]:
    """The candidates vLLM's ``get_valid_backends`` weighed for the layer, in its priority order, each with the
    reasons its ``validate_configuration`` (or its import on this host) refused it (empty: valid)."""
    valid, invalid = platform.get_valid_backends(platform.get_device_capability(), attn_selector_config, num_heads)
    weighed = [(c.priority, c.backend.name, []) for c in valid]
    weighed += [(priority, backend.name, list(reasons)) for backend, (priority, reasons) in invalid.items()]
    return [(name, reasons) for _priority, name, reasons in sorted(weighed)]


def _host_dependence(candidates) -> tuple[str | None, tuple[str, ...]]:
    """(the first refusal only this host gives of a candidate vLLM weighs before settling, or None when the choice
    is the GPU host's; then the candidates the GPU host may pick)."""
    first, possible = None, []
    for name, reasons in candidates:
        if not reasons:
            possible.append(name)
            break
        if all(_host_probe(reason) for reason in reasons):
            first = first or f"{name}: {'; '.join(reasons)}"
            possible.append(name)
    return first, tuple(possible) if first else ()


def _host_probe(reason: str) -> bool:
    return any(p.search(reason) for p in HOST_PROBES)
