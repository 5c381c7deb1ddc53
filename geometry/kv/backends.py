"""The attention backends the simulator models, with the facts the modelled vLLM
release's backend classes declare (kernel block sizes, layouts, spec customisation).

vLLM picks backends in ``vllm/platforms/cuda.py``. Which backend the target's
full-attention and MLA layers get is vLLM's selection, modelled in
geometry/kv/target_backend.py (the drafter's automatic choice in
geometry/kv/drafter_backend.py); both are checked by the oracle against vLLM's
own selector. The indexer's and the kpool tail's backends are the model's own.
The numbers each backend contributes are read by the oracle from the real classes.

Target, GLM-5.3-Flash (``Glm5NextForCausalLM``, sparse MLA with kpool indexer):
  * sparse-indexer cache  -> ``Glm5NextIndexerBackend``: kernel blocks
    ``index_kpool * n`` for n in DeepGEMM's paged-MQA page sizes, (32, 64), only
    (64,) on family 120.  Fixed sizes, so vLLM's ``customize_attention_spec``
    gives the indexer spec ``block_stride_alignment = MultipleOf(max size)``.
  * kpool tail ring       -> ``KpoolTailBackend``: ``MultipleOf(1)``, layouts
    (BLHNC,) only: this forces the block-outermost layout and therefore the
    packed grouping path.
  * MLA latent            -> sparse FlashInfer MLA: family 100
    ``FlashInferMLASparseTRTLLMBackend`` (MultipleOf(32), rows of 32), family
    120 ``FlashInferMLASparseSM120Backend`` (MultipleOf(64), rows of 64),
    family 90 ``FlashInferMLASparseSM90Backend`` (MultipleOf(64), rows of 1).
    ``customize_spec`` sets ``block_stride_alignment = rows * bytes/token``.
    On family 100 with an fp8 cache vLLM's priority list puts
    FLASHINFER_MLA_SPARSE first among sparse backends; with a bf16 cache and
    <= 16 heads/rank FA4 sparse would win (576-wide latents only), and with more
    heads FlashMLA sparse: FlashInfer sparse stands in for FlashMLA sparse where
    it takes the layer too (the recipe pins fp8). On family 90 a latent other than
    512 wide ranks FLASH_ATTN_MLA_SPARSE first (16-bit caches, any head size:
    modelled, ``MultipleOf(64)``, rows of 1). A latent no sparse backend takes
    (FlashInfer's and FlashMLA's sparse classes take 512 and 576 only), or a
    user block none of them divides, is vLLM's "No valid attention backend"
    (target_backend.py).
    Family 120 (SM12x: RTX PRO 6000 is 12.0, GB10 / DGX Spark 12.1; vLLM's
    family test reads the major only) lists TRITON_MLA (dense) and
    FLASHINFER_MLA_SPARSE_SM120 only, so the sparse layers get the latter
    or no backend at all.  It takes auto/fp8/fp8_e4m3/fp8_ds_mla, and
    ``_canonicalize_sparse_mla_kv_cache_dtype`` runs auto/fp8/fp8_e4m3 as
    ``fp8_ds_mla`` (656 B per token), which ``MLAAttention`` writes back to
    ``cache_config.cache_dtype``.  The hybrid alignment still counts 512 B
    per token (its 1-token spec has no ``state_content_bytes``).
  * KDA / GDN layers      -> SSM backends (ignored by block-size selection).

Target, Qwen3 / Qwen3-MoE / Qwen3-Next full attention: vLLM's choice for a causal
decoder layer (target_backend.py): FLASHINFER on SM10x (``FLASHINFER_SM10X``), FLASH_ATTN
on SM90 and SM12x, FLASHINFER on SM12x for an fp8 cache (FA2 takes none), TRITON_ATTN
where neither takes the layer.

Target, Kimi Linear (``KimiLinearForCausalLM``, KDA + *dense* NoPE MLA; the
model lives in ``vllm/models/kimi_k3``, its MLA layer asks for
``use_sparse=False``): vLLM's first valid dense MLA candidate (target_backend.py):
FLASHINFER_MLA on SM10x (fixed kernel blocks [32, 64], so
``customize_attention_spec`` sets ``MultipleOf(64)``; qk_nope_head_dim in 64/128/192),
FLASH_ATTN_MLA (``MultipleOf(16)``, FA3 MLA assumed present) on SM90 for a 16-bit cache
and FLASHMLA (fixed [64]) for fp8, TRITON_MLA (``MultipleOf(16)``) on SM12x and wherever
a user ``--block-size`` rules out the others.

Drafter (DFlash / DFlash2, ``Qwen3`` sliding-window layers), on vLLM's CPU platform: ``CPU_ATTN``
(``[MultipleOf(32)]``), what ``CpuPlatform`` gives every decoder layer.  On a GPU with
``attention_backend`` pinned in ``--speculative-config`` (the recipes pin FLASH_ATTN): that backend;
only FLASH_ATTN (``[MultipleOf(16)]``) is modelled.  With it unset or "auto": vLLM's automatic
choice, geometry/kv/drafter_backend.py (a causal drafter on SM10x gets FLASHINFER, which is refused
there; an fp8 cache on SM12x FLASHINFER or TRITON_ATTN, modelled below).  FLASH_ATTN's KV dtypes
are its class list; on family 120 it runs FA2, which takes no fp8 cache (see ``FLASH_ATTN_FA2``).

FA4 head-dim-256 and SM90 FP8 head-dim-512 FlashAttention special cases depend
on the installed flash-attn build; the simulator models the generic
``MultipleOf(16)`` declaration (what vLLM reports when FA4 is absent).
"""

from __future__ import annotations

from dataclasses import dataclass

from geometry.vllm_versions import VllmRelease

# KVCacheLayout values (vllm/v1/kv_cache_layout.py): the stride order of the
# logical dims L=0, B=1, H=2, N=3, C=4.
LAYOUTS = {
    "LBHNC": (0, 1, 2, 3, 4),
    "LBNHC": (0, 1, 3, 2, 4),
    "LHBNC": (0, 2, 1, 3, 4),
    "BLHNC": (1, 0, 2, 3, 4),
    "BLNHC": (1, 0, 3, 2, 4),
    "BHLNC": (1, 2, 0, 3, 4),
}
DEFAULT_LAYOUT_PREFERENCE = ("LBNHC", "LBHNC", "BLNHC", "BLHNC", "LHBNC", "BHLNC")


def layout_is_block_outermost(name: str) -> bool:
    return LAYOUTS[name][0] == 1


def layout_is_block_compact(name: str) -> bool:
    return set(LAYOUTS[name][:2]) == {0, 1}


def layout_is_layer_compact(name: str) -> bool:
    return LAYOUTS[name][0] == 0


@dataclass(frozen=True)
class Multiple:
    """vLLM's ``MultipleOf(base)``."""

    base: int


@dataclass(frozen=True)
class Backend:
    name: str
    kernel_block_sizes: tuple  # of int | Multiple
    layouts: tuple[str, ...] | None = None
    is_ssm: bool = False
    # rows of customize_spec's align_blocks_to_rows (None = no customisation)
    align_rows: int | None = None
    # the class's ``supported_kv_cache_dtypes`` (None = not modelled: any)
    kv_cache_dtypes: tuple[str, ...] | None = None

    def takes_kv_cache_dtype(self, kv_cache_dtype: str) -> bool:
        return self.kv_cache_dtypes is None or kv_cache_dtype in self.kv_cache_dtypes

    @property
    def min_kernel_block(self) -> int:
        return min(s.base if isinstance(s, Multiple) else s for s in self.kernel_block_sizes)

    @property
    def fixed_sizes_only(self) -> bool:
        return bool(self.kernel_block_sizes) and all(isinstance(s, int) for s in self.kernel_block_sizes)

    def supports_block_size(self, block_size: int) -> bool:
        if not self.kernel_block_sizes:
            return True
        for s in self.kernel_block_sizes:
            base = s.base if isinstance(s, Multiple) else s
            if block_size % base == 0:
                return True
        return False

    def preferred_block_size(self, default: int) -> int:
        if not self.kernel_block_sizes:
            return default
        if self.supports_block_size(default):
            return default
        return self.min_kernel_block


SSM = Backend("SSM", (), None, is_ssm=True)
FLASH_ATTN = Backend("FLASH_ATTN", (Multiple(16),), kv_cache_dtypes=("auto", "float16", "bfloat16", "fp8", "fp8_e4m3"))
KPOOL_TAIL = Backend("KPOOL_TAIL", (Multiple(1),), ("BLHNC",))


def glm5_indexer_backend(index_kpool: int, family: int) -> Backend:
    pages = (64,) if family == 120 else (32, 64)
    return Backend("GLM5_NEXT_INDEXER", tuple(index_kpool * p for p in pages))


SPARSE_MLA_FAMILIES = (100, 120, 90)


def sparse_mla_backend(family: int) -> Backend:
    if family == 100:
        return Backend(
            "FLASHINFER_MLA_SPARSE",
            (Multiple(32),),
            align_rows=32,
            kv_cache_dtypes=("auto", "float16", "bfloat16", "fp8", "fp8_e4m3"),
        )
    if family == 120:
        return Backend(
            "FLASHINFER_MLA_SPARSE_SM120",
            (Multiple(64),),
            align_rows=64,
            kv_cache_dtypes=("auto", "fp8", "fp8_e4m3", "fp8_ds_mla"),
        )
    if family == 90:
        return Backend(
            "FLASHINFER_MLA_SPARSE_SM90",
            (Multiple(64),),
            align_rows=1,
            kv_cache_dtypes=("auto", "bfloat16", "fp8", "fp8_e4m3"),
        )
    raise ValueError(f"no sparse MLA backend modelled for capability family {family}")


# The packed DeepSeek layout: 512 B quantized NoPE + 16 B scales + 128 B RoPE
# per token whatever the model's rope width (MLAAttention.get_kv_cache_spec's
# state_content_bytes).
FP8_DS_MLA_BYTES_PER_TOKEN = 656


def fp8_ds_mla_row_bytes(backend: Backend, kv_lora_rank: int, qk_rope_head_dim: int, vllm: VllmRelease) -> int:
    """The bytes of one fp8_ds_mla token row on ``vllm``: the packed row, or (where the release sizes
    the row by the backend's implementation, ``get_fp8_ds_mla_row_bytes``) FLASHINFER_MLA_SPARSE_SM120's
    ``sm120_ropeless_ds_mla_row_bytes`` for a 512-wide latent without RoPE."""
    ropeless_sm120 = vllm.sm120_ropeless_ds_mla_row_bytes
    if (
        ropeless_sm120 is not None
        and backend.name == "FLASHINFER_MLA_SPARSE_SM120"
        and kv_lora_rank == 512
        and qk_rope_head_dim == 0
    ):
        return ropeless_sm120
    return FP8_DS_MLA_BYTES_PER_TOKEN


def canonical_sparse_mla_kv_cache_dtype(backend: Backend, kv_cache_dtype: str) -> str:
    """``_canonicalize_sparse_mla_kv_cache_dtype`` (mla_attention.py) for the
    modelled sparse backends: FLASHINFER_MLA_SPARSE_SM120 runs auto, fp8 and
    fp8_e4m3 as fp8_ds_mla."""
    if backend.name == "FLASHINFER_MLA_SPARSE_SM120" and kv_cache_dtype in ("auto", "fp8", "fp8_e4m3"):
        return "fp8_ds_mla"
    return kv_cache_dtype


# The dense MLA backends vLLM's selector may give Kimi Linear's latent (geometry/kv/target_backend.py chooses).
FLASHINFER_MLA = Backend("FLASHINFER_MLA", (32, 64), kv_cache_dtypes=("auto", "float16", "bfloat16", "fp8", "fp8_e4m3"))
FLASH_ATTN_MLA = Backend("FLASH_ATTN_MLA", (Multiple(16),), kv_cache_dtypes=("auto", "float16", "bfloat16"))
FLASHMLA = Backend("FLASHMLA", (64,), kv_cache_dtypes=("auto", "float16", "bfloat16", "fp8", "fp8_e4m3"))
TRITON_MLA = Backend("TRITON_MLA", (Multiple(16),), kv_cache_dtypes=("auto", "float16", "bfloat16", "fp8", "fp8_e4m3"))
# FlashAttnMLASparseBackend (SM90, 16-bit caches, any head size): [MultipleOf(64)], customize_spec
# align_blocks_to_rows(spec) (rows of 1).
FLASH_ATTN_MLA_SPARSE = Backend(
    "FLASH_ATTN_MLA_SPARSE", (Multiple(64),), align_rows=1, kv_cache_dtypes=("auto", "float16", "bfloat16")
)


# FLASH_ATTN on family 120 runs FA2 whatever flash-attn build is installed
# (fa_utils.get_flash_attn_version: FA3 is chosen on SM90 only, FA4 on SM10x
# only), and flash_attn_supports_kv_cache_dtype takes a quantized cache only
# with FA3/FA4 on SM90 or FA4 on family 100: no fp8 KV there.
FLASH_ATTN_FA2 = Backend("FLASH_ATTN", (Multiple(16),), kv_cache_dtypes=("auto", "float16", "bfloat16"))


# FlashInferBackend off SM10x: kernel blocks [16, 32, 64] (its larger pages need SM10x), any layout,
# no spec customisation outside nvfp4 caches (not modelled).
FLASHINFER = Backend(
    "FLASHINFER", (16, 32, 64), kv_cache_dtypes=("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
)
# TritonAttentionBackend: [MultipleOf(16)], any layout, no spec customisation outside the
# per-token-head caches (not modelled).
# FlashInferBackend on SM10x: head-major blocks only (supported_kv_cache_layouts: LBHNC, BLHNC). Its kernel
# blocks are [16, 32, 64], and up to 1024 where the serving host runs TRT-LLM attention (flashinfer-cubin or
# NVIDIA's artifactory) for a GQA layer: fixed sizes either way, so customize_attention_spec sets a block
# stride of MultipleOf(64) or MultipleOf(1024) whole kernel blocks, which divides every layer-outer block
# stride alike (a target's full-attention layers resolve LBHNC: the gate plans the same bytes either way).
FLASHINFER_SM10X = Backend("FLASHINFER", (16, 32, 64), ("LBHNC", "BLHNC"), kv_cache_dtypes=FLASHINFER.kv_cache_dtypes)
TRITON_ATTN = Backend(
    "TRITON_ATTN", (Multiple(16),), kv_cache_dtypes=("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
)


# A host without a GPU: vLLM's CPU platform (CpuPlatform) stands where a capability family would.
CPU_FAMILY = 0
# CPUAttentionBackend (vllm/v1/attention/backends/cpu_attn.py): MultipleOf(32), head-major blocks
# (LBHNC only). Its fp8 caches depend on the CPU's instruction set: only the model dtype is modelled.
CPU_ATTN = Backend("CPU_ATTN", (Multiple(32),), ("LBHNC",), kv_cache_dtypes=("auto", "bfloat16", "float16"))
CPU_ATTN_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


# CpuPlatform.check_and_update_config turns async scheduling off: one batch in flight.
CPU_CONCURRENT_BATCHES = 1


def cpu_ssm_state_dtype(avx512_bf16: bool) -> str | None:
    """The SSM state dtype on vLLM's CPU platform: CpuPlatform.check_and_update_config resets
    mamba_ssm_cache_dtype "auto" to float32 on a CPU with AVX512-BF16 (the accelerated GDN kernels'
    state); without it "auto" stays (None: the model dtype)."""
    return "float32" if avx512_bf16 else None


def drafter_backend(requested: str | None, family: int) -> Backend:
    """The drafter's pinned attention backend (the speculative config's ``attention_backend``):
    FLASH_ATTN on a GPU family (FA2 on 120), CPU_ATTN on vLLM's CPU platform, the only attention
    backend CpuPlatform.get_attn_backend_cls returns for a decoder. vLLM's automatic choice on a GPU
    is geometry/kv/drafter_backend.py's."""
    if family == CPU_FAMILY:
        if requested in (None, "CPU_ATTN", "auto"):
            return CPU_ATTN
        raise ValueError(f"drafter attention backend {requested!r} is not modelled on the CPU platform (only CPU_ATTN)")
    if requested == "FLASH_ATTN":
        return FLASH_ATTN_FA2 if family == 120 else FLASH_ATTN
    raise ValueError(f"drafter attention backend {requested!r} is not modelled (only FLASH_ATTN)")
