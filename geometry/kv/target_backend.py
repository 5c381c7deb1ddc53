"""The attention backend vLLM's selector gives the target's full-attention and MLA layers (stdlib only).

A layer's constructor asks ``get_attn_backend``; on a GPU that is ``CudaPlatform.get_attn_backend_cls``
(vllm/platforms/cuda.py): ``get_valid_backends`` walks the candidates of ``_get_backend_priorities`` in order,
asks each class's ``validate_configuration`` (vllm/v1/attention/backend.py) and the first with no reason wins;
with none vLLM raises "No valid attention backend found ..." while the layer is built (the model does not
load). Every release in geometry/vllm_versions.py ranks and declares the candidates below alike.

Full attention (Qwen3, Qwen3-MoE, Qwen3-Next; causal, no sinks): the candidates and checks of a decoder layer,
the ones geometry/kv/drafter_backend.py models for the drafter (``select``). On SM10x FLASHINFER comes first
(cuda.py, ``device_capability.major == 10 and not use_non_causal``); FLASH_ATTN runs FA2 on SM12x, which takes
no fp8 cache, so an fp8 cache there gets FLASHINFER too.

MLA (GLM-5.3's sparse latent, Kimi Linear's dense NoPE latent), ``_get_backend_priorities(use_mla=True)``:

* SM10x: FLASHINFER_MLA, TOKENSPEED_MLA, CUTLASS_MLA, FLASH_ATTN_MLA, FLASHMLA, TRITON_MLA, then the sparse
  ones: FLASHINFER_MLA_SPARSE, FLASHMLA_SPARSE for a quantized cache; FLASH_ATTN_MLA_SPARSE_FA4,
  FLASHINFER_MLA_SPARSE, FLASHMLA_SPARSE for a 16-bit one and at most 16 heads per rank; FLASHMLA_SPARSE,
  FLASHINFER_MLA_SPARSE above.
* SM12x: TRITON_MLA, FLASHINFER_MLA_SPARSE_SM120.
* SM90: FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA, then FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE and
  FLASHINFER_MLA_SPARSE_SM90 (first of the three for a 512-wide latent).

What ``validate_configuration`` checks of an MLA candidate, from the class's declarations (``CANDIDATES``):
the head size (``kv_lora_rank + qk_rope_head_dim``; the sparse FlashInfer and FlashMLA classes take 512 and 576
only, FA4 sparse 576, MLACommonBackend 320/512/576, TRITON_MLA and FLASH_ATTN_MLA_SPARSE any), the KV cache dtype,
a user ``--block-size`` (``supports_block_size``: a multiple of one kernel block size), sparse or dense, the
compute capability; and of ``supports_combination`` the notes the simulator reads (FLASHINFER_MLA's
qk_nope_head_dim in 64/128/192, TOKENSPEED_MLA's DeepSeek-R1 dimensions). A GPU host is assumed to have the
kernels the candidates probe for (FlashMLA's, FlashInfer's, FA3 MLA on SM90; not the tokenspeed_mla package).

Where vLLM picks a backend the simulator does not model (TOKENSPEED_MLA, CUTLASS_MLA, FLASHMLA_SPARSE,
FLASH_ATTN_MLA_SPARSE_FA4, FLEX_ATTENTION, TURBOQUANT), the family's modelled sparse backend stands in for a
sparse layer when it takes the layer too (geometry/kv/backends.py says why); otherwise the input is refused as
not modelled (``TargetBackendNotModelled``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from geometry.errors import BadInput
from geometry.kv import backends as B
from geometry.kv.drafter_backend import DrafterAsk, select
from geometry.kv.kv_spec import SimulatedError

_MLA_COMMON_HEAD_SIZES = (320, 512, 576)  # MLACommonBackend.get_supported_head_sizes
_SPARSE_HEAD_SIZES = (512, 576)  # the sparse FlashInfer classes' and FlashMLASparseBackend's
_MLA_KV = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")


class TargetBackendNotModelled(BadInput):
    """vLLM's selector gives the target's attention layers a backend the simulator does not model (``backend``)."""

    def __init__(self, backend: str, layers: str):
        super().__init__(
            f"vLLM runs the target's {layers} on {backend} here, whose geometry the gate does not model "
            "(geometry/kv/target_backend.py)"
        )
        self.backend = backend


@dataclass(frozen=True)
class MlaAsk:
    """What ``MLAAttention.__init__`` (Kimi: ``MultiHeadLatentAttention.__init__``) hands the selector."""

    family: int
    head_size: int  # kv_lora_rank + qk_rope_head_dim
    kv_cache_dtype: str  # the cache config's when the layer is built (before any sparse canonicalisation)
    user_block_size: int | None  # --block-size (None: the selector is not asked about blocks)
    num_heads: int  # attention heads per rank
    use_sparse: bool
    qk_nope_head_dim: int
    r1_dims: bool  # (qk_nope_head_dim, qk_rope_head_dim, v_head_dim) == (128, 64, 128)


@dataclass(frozen=True)
class Candidate:
    """One MLA backend class as ``validate_configuration`` sees it."""

    backend: B.Backend  # its name, kernel block sizes and supported_kv_cache_dtypes
    families: tuple[int, ...] | None  # supports_compute_capability (None: every family)
    head_sizes: tuple[int, ...] | None  # get_supported_head_sizes (None: any)
    sparse: bool
    modelled: bool  # whether the simulator plans its geometry
    # supports_combination's note the simulator reads (None: nothing it reads)
    note: Callable[[MlaAsk], str | None] | None = None

    @property
    def name(self) -> str:
        return self.backend.name

    def reasons(self, ask: MlaAsk) -> list[str]:
        """``validate_configuration``'s reasons for ``ask`` (empty: valid)."""
        reasons = []
        if self.head_sizes is not None and ask.head_size not in self.head_sizes:
            reasons.append("head_size not supported")
        if not self.backend.takes_kv_cache_dtype(ask.kv_cache_dtype):
            reasons.append("kv_cache_dtype not supported")
        if ask.user_block_size is not None and not self.backend.supports_block_size(ask.user_block_size):
            reasons.append("block_size not supported")
        if ask.use_sparse != self.sparse:
            reasons.append("sparse not supported" if ask.use_sparse else "non-sparse not supported")
        if self.families is not None and ask.family not in self.families:
            reasons.append("compute capability not supported")
        if self.note is not None and (note := self.note(ask)):
            reasons.append(note)
        return reasons


def _flashinfer_mla_note(ask: MlaAsk) -> str | None:
    if ask.qk_nope_head_dim not in (64, 128, 192):
        return f"FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got {ask.qk_nope_head_dim}"
    return None


def _tokenspeed_note(ask: MlaAsk) -> str | None:
    return None if ask.r1_dims else "tokenspeed_mla requires DeepSeek R1 MLA dimensions"


CANDIDATES = {
    c.name: c
    for c in (
        Candidate(B.FLASHINFER_MLA, (100,), _MLA_COMMON_HEAD_SIZES, False, True, _flashinfer_mla_note),
        Candidate(
            B.Backend("TOKENSPEED_MLA", (32, 64), kv_cache_dtypes=("fp8", "fp8_e4m3")),
            (100,),
            _MLA_COMMON_HEAD_SIZES,
            False,
            False,
            _tokenspeed_note,
        ),
        Candidate(
            B.Backend("CUTLASS_MLA", (128,), kv_cache_dtypes=_MLA_KV), (100,), _MLA_COMMON_HEAD_SIZES, False, False
        ),
        Candidate(B.FLASH_ATTN_MLA, (90,), _MLA_COMMON_HEAD_SIZES, False, True),
        Candidate(B.FLASHMLA, (90, 100), _MLA_COMMON_HEAD_SIZES, False, True),
        Candidate(B.TRITON_MLA, None, None, False, True),
        Candidate(B.sparse_mla_backend(100), (100,), _SPARSE_HEAD_SIZES, True, True),
        Candidate(
            B.Backend(
                "FLASHMLA_SPARSE",
                (B.Multiple(64),),
                kv_cache_dtypes=("auto", "bfloat16", "fp8_ds_mla", "fp8", "nvfp4_ds_mla"),
            ),
            (90, 100),
            _SPARSE_HEAD_SIZES,
            True,
            False,
        ),
        Candidate(
            B.Backend("FLASH_ATTN_MLA_SPARSE_FA4", (B.Multiple(64),), kv_cache_dtypes=("auto", "bfloat16")),
            (100,),
            (576,),
            True,
            False,
        ),
        Candidate(B.sparse_mla_backend(120), (120,), _SPARSE_HEAD_SIZES, True, True),
        Candidate(B.sparse_mla_backend(90), (90,), _SPARSE_HEAD_SIZES, True, True),
        Candidate(B.FLASH_ATTN_MLA_SPARSE, (90,), None, True, True),
    )
}


def mla_priorities(ask: MlaAsk) -> tuple[str, ...]:
    """``_get_backend_priorities(use_mla=True, ...)`` for ``ask``'s family, cache dtype, heads and head size."""
    if ask.family == 100:
        if ask.kv_cache_dtype.startswith("fp8"):  # is_quantized_kv_cache
            sparse = ("FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE")
        elif ask.num_heads <= 16:
            sparse = ("FLASH_ATTN_MLA_SPARSE_FA4", "FLASHINFER_MLA_SPARSE", "FLASHMLA_SPARSE")
        else:
            sparse = ("FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE")
        return ("FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA") + sparse
    if ask.family == 120:
        return ("TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120")
    if ask.family == 90:
        tail = ("FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE")
        sm90 = ("FLASHINFER_MLA_SPARSE_SM90",)
        return ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA") + (
            sm90 + tail if ask.head_size == 512 else tail + sm90
        )
    raise BadInput(f"no MLA backend is modelled for capability family {ask.family}")


def mla_backend(ask: MlaAsk) -> B.Backend:
    """The backend vLLM's selector gives an MLA layer; SimulatedError (vLLM's ValueError) when no candidate is
    valid, TargetBackendNotModelled when vLLM's choice is not modelled (see the module docstring)."""
    invalid: dict[str, list[str]] = {}
    for name in mla_priorities(ask):
        candidate = CANDIDATES[name]
        reasons = candidate.reasons(ask)
        if reasons:
            invalid[name] = reasons
            continue
        if candidate.modelled:
            return candidate.backend
        if ask.use_sparse:
            stand_in = B.sparse_mla_backend(ask.family)
            if not CANDIDATES[stand_in.name].reasons(ask):
                return stand_in
        raise TargetBackendNotModelled(name, "sparse MLA layers" if ask.use_sparse else "MLA layers")
    listed = ", ".join(f"{n}: [{', '.join(r)}]" for n, r in invalid.items())
    raise SimulatedError(
        "ValueError",
        f"No valid attention backend found for the target's MLA layers (head_size={ask.head_size}, "
        f"kv_cache_dtype={ask.kv_cache_dtype}). Reasons: {{{listed}}}.",
    )


def full_attention_backend(ask: DrafterAsk) -> B.Backend:
    """The backend vLLM's selector gives the target's (causal) full-attention layers on a GPU family: its choice
    among drafter_backend's candidates, as the modelled backend; SimulatedError when none is valid."""
    name = select(ask, "the target's attention layers")
    if name == "FLASHINFER":
        return B.FLASHINFER_SM10X if ask.family == 100 else B.FLASHINFER
    if name == "FLASH_ATTN":
        return B.FLASH_ATTN_FA2 if ask.family == 120 else B.FLASH_ATTN
    if name == "TRITON_ATTN":
        return B.TRITON_ATTN
    raise TargetBackendNotModelled(name, "attention layers")


def mla_ask(tc, family: int, kv_cache_dtype: str, user_block_size: int | None, tp: int, use_sparse: bool) -> MlaAsk:
    """The question an MLA layer of the text config ``tc`` asks (GLM-5.3: sparse, Kimi Linear: dense)."""
    rope = int(tc.get("qk_rope_head_dim", 0) or 0)
    nope = int(tc.get("qk_nope_head_dim", 0) or 0)
    return MlaAsk(
        family=family,
        head_size=int(tc["kv_lora_rank"]) + rope,
        kv_cache_dtype=kv_cache_dtype,
        user_block_size=user_block_size,
        num_heads=int(tc["num_attention_heads"]) // tp,
        use_sparse=use_sparse,
        qk_nope_head_dim=nope,
        r1_dims=(nope, rope, int(tc.get("v_head_dim", 0) or 0)) == (128, 64, 128),
    )
