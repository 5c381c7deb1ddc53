"""The attention backend the modelled vLLM release runs the DFlash drafter's layers on (stdlib only).

With ``attention_backend`` unset (or "auto") in ``--speculative-config``, ``load_dflash_model`` leaves the
choice to ``CudaPlatform.get_attn_backend_cls`` (vllm/platforms/cuda.py): the candidates of
``_get_backend_priorities`` for a non-MLA layer, in order, and the first whose
``validate_configuration`` finds nothing wrong. The drafter's config decides causality
(``dflash_has_any_non_causal``: the draft config is built with ``use_non_causal`` when any layer is
non-causal), and only SM10x reads it:

* SM10x, every layer causal: FLASHINFER, FLASH_ATTN, TRITON_ATTN, FLEX_ATTENTION, TURBOQUANT;
* otherwise: FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, TURBOQUANT.

What each candidate checks, for a decoder layer without sinks (``CANDIDATES``): the model dtype, the
KV cache dtype, the head size and a user ``--block-size`` (a multiple of 16 for each candidate here,
except where FLASH_ATTN's kernel blocks follow the *target's* head size: ``flash_attn_kernel_blocks``).
FLASH_ATTN's answer for a quantized cache and for heads over 256 depends on the FlashAttention
version vLLM resolves (``fa_utils.get_flash_attn_version``, with the FA2, FA3 and FA4 kernels the
release's wheel ships; ``flash_attn_version``): FA3 on SM90 (FA4 above head 256), FA4 on SM10x up to
head 128 and at 256 (TMEM: FA2 otherwise), FA2 on SM12x. FA3, and FA4 on SM90 at head 512, take an
fp8 cache on SM90; FA4 takes one on SM10x; FA2 takes none.

Of the choices, FLASH_ATTN (``[MultipleOf(16)]``), TRITON_ATTN (``[MultipleOf(16)]``) and FLASHINFER
off SM10x (kernel blocks [16, 32, 64]) are modelled (geometry/kv/backends.py). FLASHINFER on SM10x
advertises kernel blocks up to 1024 when TRT-LLM attention is available on the serving host
(``supports_trtllm_attention``: the flashinfer-cubin package, else a download from NVIDIA's
artifactory at start-up), which a build cannot know: refused, as is FLEX_ATTENTION. No valid
candidate (an ``fp8_ds_mla`` cache the drafter inherits on SM12x) is vLLM's ValueError when the
drafter loads. A pinned backend is validated alone, with the same checks (``selected_backend_error``:
vLLM's "Selected backend ... is not valid" ValueError). geometry/oracle/ asks vLLM's own selector the
same questions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from geometry.errors import BadInput
from geometry.kv import backends as B
from geometry.kv.kv_spec import SimulatedError
from geometry.vllm_versions import VllmRelease

_QUANTIZED = ("fp8", "fp8_e4m3", "fp8_e5m2")
# Each backend's ``supported_kv_cache_dtypes``: its entry in backends.py.
_FA_KV_DTYPES = B.FLASH_ATTN.kv_cache_dtypes
_FLASHINFER_KV_DTYPES = B.FLASHINFER.kv_cache_dtypes
_TRITON_KV_DTYPES = B.TRITON_ATTN.kv_cache_dtypes
_FLEX_KV_DTYPES = ("auto", "float16", "bfloat16")
_FLASHINFER_HEAD_SIZES = (64, 128, 256, 512)
_HALF_DTYPES = ("float16", "bfloat16")


class DrafterBackendNotModelled(BadInput):
    """vLLM's automatic choice for the drafter is a backend the simulator does not model (``backend``)."""

    def __init__(self, backend: str, why: str):
        super().__init__(
            f"vLLM runs the drafter's attention on {backend} here (drafter attention_backend auto); "
            f"{why}: set the drafter's attention_backend to FLASH_ATTN"
        )
        self.backend = backend


@dataclass(frozen=True)
class DrafterAsk:
    """What ``Attention.__init__`` hands the selector for a drafter layer."""

    family: int
    head_size: int
    kv_cache_dtype: str  # the cache-dtype string the drafter runs
    model_dtype: str  # torch's default dtype while the drafter is built: the model dtype
    non_causal: bool  # the draft config's use_non_causal
    user_block_size: int | None  # --block-size (None: vLLM picks)
    # The model config's head size and the cache config's dtype as the target's layers left it:
    # FLASH_ATTN's kernel block sizes without a spec read them (flash_attn_kernel_blocks).
    target_head_size: int
    target_kv_cache_dtype: str
    # The release planned: its sm90_fp8_d512_block_multiple is FLASH_ATTN's block rule for an SM90 FP8
    # head-512 cache.
    vllm: VllmRelease


def flash_attn_version(ask: DrafterAsk) -> int:
    """``get_flash_attn_version`` with the wheel's FA2/FA3/FA4 kernels, for a drafter layer: FA3 on
    SM90 (FA4 above head 256), FA4 on SM10x up to head 128 and at head 256 (its hd256 kernel, FA2
    instead under a quantized target cache or a user block that is no multiple of its 128-token
    page), FA2 otherwise."""
    if ask.family == 90:
        return 4 if ask.head_size > 256 else 3
    if ask.family == 100:
        if ask.head_size == 256:
            hd256_fallback = ask.target_kv_cache_dtype in _QUANTIZED or (
                ask.user_block_size is not None and ask.user_block_size % 128
            )
            return 2 if hd256_fallback else 4
        return 4 if ask.head_size <= 128 else 2
    return 2


def flash_attn_kernel_blocks(ask: DrafterAsk) -> int | None:
    """``FlashAttentionBackend.get_supported_kernel_block_sizes()`` as ``supports_block_size`` asks it
    (no spec: the *model config's* head size and cache dtype): the SM90 FP8 head-512 page (64) under
    FA4, the SM10x head-256 FA4 page (128; FA2, so none, with a quantized cache), else None
    (``MultipleOf(16)``). A target without soft-capping, multimodal prefix, R-SWA or DCP."""
    quantized = ask.target_kv_cache_dtype in ("fp8", "fp8_e4m3")
    if ask.family == 90 and quantized and ask.target_head_size == 512:
        return 64  # FA3 upgrades to FA4 above head 256
    if ask.family == 100 and ask.target_head_size == 256 and ask.target_kv_cache_dtype not in _QUANTIZED:
        return 128
    return None


def _flash_attn(ask: DrafterAsk) -> list[str]:
    reasons = []
    fa4_shipped = ask.family in (90, 100)  # is_fa_version_supported(4): SM9x, SM10x, SM11x
    if ask.head_size % 8 or ask.head_size > (512 if fa4_shipped else 256):
        reasons.append("head_size not supported")
    if ask.model_dtype not in _HALF_DTYPES:
        reasons.append("dtype not supported")
    if ask.kv_cache_dtype not in _FA_KV_DTYPES:
        reasons.append("kv_cache_dtype not supported")
    elif ask.kv_cache_dtype in _QUANTIZED:
        v = flash_attn_version(ask)
        on_sm90 = ask.family == 90 and (v == 3 or (v == 4 and ask.head_size == 512))
        if not (on_sm90 or (ask.family == 100 and v == 4)):
            reasons.append("kv_cache_dtype not supported")
        multiple = ask.vllm.sm90_fp8_d512_block_multiple
        if (
            multiple
            and ask.family == 90
            and ask.head_size == 512
            and ask.user_block_size is not None
            and ask.user_block_size % multiple
        ):
            reasons.append(f"SM90 d512 FP8 KV requires a block size divisible by {multiple}")
    return reasons


def _flashinfer(ask: DrafterAsk) -> list[str]:
    reasons = []
    if ask.head_size not in _FLASHINFER_HEAD_SIZES:
        reasons.append("head_size not supported")
    if ask.model_dtype not in _HALF_DTYPES:
        reasons.append("dtype not supported")
    if ask.kv_cache_dtype not in _FLASHINFER_KV_DTYPES:
        reasons.append("kv_cache_dtype not supported")
    return reasons


def _triton(ask: DrafterAsk) -> list[str]:
    reasons = []
    if ask.head_size < 32:
        reasons.append("head_size not supported")
    if ask.model_dtype not in _HALF_DTYPES + ("float32",):
        reasons.append("dtype not supported")
    if ask.kv_cache_dtype not in _TRITON_KV_DTYPES:
        reasons.append("kv_cache_dtype not supported")
    return reasons


def _flex(ask: DrafterAsk) -> list[str]:
    reasons = []
    if ask.model_dtype not in _HALF_DTYPES + ("float32",):
        reasons.append("dtype not supported")
    if ask.kv_cache_dtype not in _FLEX_KV_DTYPES:
        reasons.append("kv_cache_dtype not supported")
    return reasons


def _turboquant(ask: DrafterAsk) -> list[str]:
    return ["kv_cache_dtype not supported"]  # turboquant_* caches only, none of them modelled


# Each candidate's validate_configuration for a DFlash drafter layer (before the block size).
CANDIDATES: Mapping[str, Callable[[DrafterAsk], list[str]]] = {
    "FLASH_ATTN": _flash_attn,
    "FLASHINFER": _flashinfer,
    "TRITON_ATTN": _triton,
    "FLEX_ATTENTION": _flex,
    "TURBOQUANT": _turboquant,
}


def priorities(family: int, non_causal: bool) -> tuple[str, ...]:
    """``_get_backend_priorities`` for a non-MLA layer without multimodal prefix."""
    if family == 100 and not non_causal:
        return ("FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT")
    return ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TURBOQUANT")


def invalid_reasons(name: str, ask: DrafterAsk) -> list[str]:
    """What candidate ``name``'s ``validate_configuration`` finds wrong for a drafter layer, the
    user block size included (empty: valid)."""
    reasons = CANDIDATES[name](ask)
    kernel_block = (flash_attn_kernel_blocks(ask) if name == "FLASH_ATTN" else None) or 16
    if ask.user_block_size is not None and ask.user_block_size % kernel_block:
        reasons.append("block_size not supported")
    return reasons


def selected_backend_error(name: str, ask: DrafterAsk) -> SimulatedError | None:
    """The ValueError ``get_attn_backend_cls`` raises for a backend the speculative config's
    ``attention_backend`` selects (it validates that one alone, as it validates each candidate of
    the automatic choice); None where it is valid."""
    reasons = invalid_reasons(name, ask)
    if not reasons:
        return None
    return SimulatedError(
        "ValueError",
        f"Selected backend AttentionBackendEnum.{name} is not valid for this configuration. Reason: {reasons}",
    )


def select(ask: DrafterAsk, layers: str = "the drafter") -> str:
    """The name of the backend vLLM picks; SimulatedError (ValueError) when no candidate is valid (its message
    names the ``layers`` asked for)."""
    invalid = {}
    for name in priorities(ask.family, ask.non_causal):
        reasons = invalid_reasons(name, ask)
        if not reasons:
            return name
        invalid[name] = reasons
    listed = ", ".join(f"{n}: [{', '.join(r)}]" for n, r in invalid.items())
    raise SimulatedError(
        "ValueError",
        f"No valid attention backend found for {layers} (head_size={ask.head_size}, "
        f"kv_cache_dtype={ask.kv_cache_dtype}). Reasons: {{{listed}}}.",
    )


def modelled(name: str, family: int) -> B.Backend:
    """The modelled backend for vLLM's choice ``name``; BadInput naming it where it is not modelled."""
    if name == "FLASH_ATTN":
        return B.FLASH_ATTN_FA2 if family == 120 else B.FLASH_ATTN
    if name == "TRITON_ATTN":
        return B.TRITON_ATTN
    if name == "FLASHINFER" and family != 100:
        return B.FLASHINFER
    if name == "FLASHINFER":
        why = (
            "its kernel block sizes on SM10x depend on whether TRT-LLM attention is available on the "
            "serving host (flashinfer-cubin, or a download from NVIDIA's artifactory at start-up)"
        )
    else:
        why = "its geometry is not modelled"
    raise DrafterBackendNotModelled(name, why)


def drafter_backend(requested: str | None, ask: DrafterAsk) -> B.Backend:
    """The drafter's backend: the pinned one (FLASH_ATTN, FA2 on SM12x; CPU_ATTN on vLLM's CPU
    platform), or vLLM's automatic choice (``select``) where it is modelled. BadInput for what is not
    modelled, SimulatedError where vLLM finds no backend."""
    if ask.family == B.CPU_FAMILY or requested not in (None, "auto"):
        try:
            return B.drafter_backend(requested, ask.family)
        except ValueError as exc:  # a pinned backend that is not modelled
            raise BadInput(str(exc)) from exc
    return modelled(select(ask), ask.family)
