"""The pieces every model builder uses: config reading, the ``Layer`` and
``Target`` a builder returns, the mamba state sizes and the spec builders
(each a layer's ``get_kv_cache_spec`` after the runner's
``customize_attention_spec``) (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from geometry.errors import BadInput
from geometry.image_contract import Role
from geometry.kv import backends as B
from geometry.kv import target_backend
from geometry.kv.drafter_backend import DrafterAsk
from geometry.kv.kv_spec import AttentionSpec, CacheConfig, KVCacheSpec, MambaSpec, SimulatedError, SlidingWindowSpec
from geometry.kv.units import DTYPE_BYTES
from geometry.vllm_versions import VllmRelease

SpecBuilder = Callable[[CacheConfig], KVCacheSpec]

_TORCH_STORAGE = {"fp8": "uint8", "fp8_e4m3": "uint8", "fp8_e5m2": "uint8", "half": "float16", "fp8_ds_mla": "uint8"}


def required(cfg: Mapping[str, Any], key: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise BadInput(f"config lacks {key!r}")
    return cfg[key]


def kv_dtype_name(kv: str, model_dtype: str) -> str:
    """The torch storage dtype vLLM uses for a cache-dtype string the layers
    run (``STR_DTYPE_TO_TORCH_DTYPE``; "auto" is the model dtype)."""
    return model_dtype if kv == "auto" else _TORCH_STORAGE.get(kv, kv)


@dataclass(frozen=True)
class Layer:
    """One layer in vLLM's registration order, its attention backend and its
    spec builder."""

    name: str
    owner: Role
    role: str  # kda | gdn | mla_latent | sparse_indexer | kpool_tail | attention | sliding_window
    backend: B.Backend
    build: SpecBuilder = field(compare=False, repr=False)


@dataclass(frozen=True)
class TargetSettings:
    """What a target builder reads besides the target's config."""

    tc: Mapping[str, Any]  # the text config
    layer_types: tuple[str, ...]  # the config's, possibly empty
    tensor_parallel_size: int
    capability_family: int
    cpu_avx512_bf16: bool  # on vLLM's CPU platform: the serving CPU has AVX512-BF16
    num_spec: int
    model_dtype: str
    kv_cache_dtype: str  # the cache-dtype string the target layers run
    max_model_len: int
    # The release planned: a rule that differs between releases reads its field where it applies.
    vllm: VllmRelease
    # --block-size (None: vLLM picks): the backend selector checks it when the layers are built.
    user_block_size: int | None = None

    @property
    def num_layers(self) -> int:
        return int(required(self.tc, "num_hidden_layers"))

    @property
    def kv_storage_dtype(self) -> str:
        return kv_dtype_name(self.kv_cache_dtype, self.model_dtype)


@dataclass(frozen=True)
class Target:
    """A target model's layers and the facts ``_align_hybrid_block_size`` reads."""

    layers: tuple[Layer, ...]
    use_mla: bool
    head_size: int  # attention head size (MLA: the latent)
    num_kv_heads: int  # per rank
    mamba_page: int  # real bytes of one mamba layer's state
    # Blocks a request holds per mamba group in "align" mode for prefill checkpoints (the layers' MambaSpec
    # num_prefill_checkpoint_blocks: GLM-5.3's KDA layers under FlashKDA).
    prefill_checkpoint_blocks: int = 0
    # The tokens a prefill checkpoint inside a chunk must be a multiple of, from the chunk's start (the
    # layers' MambaSpec prefill_checkpoint_alignment; None: the kernel exports none).
    prefill_checkpoint_alignment: int | None = None


@dataclass(frozen=True)
class MambaState:
    shapes: tuple
    dtypes: tuple
    bytes: int


def kda_state(heads: int, head_dim: int, conv_kernel: int, tp: int, num_spec: int, model_dtype: str) -> MambaState:
    """MambaStateShapeCalculator.kda_state_shape / kda_state_dtype (conv state
    in the model dtype, recurrent state fp32)."""
    if heads % tp:
        raise SimulatedError("AssertionError", f"linear_num_heads {heads} not divisible by TP {tp}")
    conv_dim = heads * head_dim + 2 * heads * head_dim
    if conv_dim % tp:
        raise SimulatedError("AssertionError", "conv_dim not divisible by TP")
    conv = (conv_dim // tp, conv_kernel - 1 + num_spec)
    rec = (heads // tp, head_dim, head_dim)
    total = conv[0] * conv[1] * DTYPE_BYTES[model_dtype] + rec[0] * rec[1] * rec[2] * 4
    return MambaState((conv, rec), (model_dtype, "float32"), total)


def check_flash_attn_head_size(head_size: int) -> None:
    if head_size == 256:
        raise BadInput("FLASH_ATTN with head size 256 (FA4 hd256 pages) is not modelled")


def full_attention_backend(s: TargetSettings, head_size: int) -> B.Backend:
    """The backend a target's full-attention (GQA) layers run: vLLM's selection on a GPU family
    (geometry/kv/target_backend.py), CPU_ATTN on vLLM's CPU platform (``CPU_FAMILY``)."""
    if s.capability_family == B.CPU_FAMILY:
        check_cpu_attn(head_size, s.kv_cache_dtype)
        return B.CPU_ATTN
    backend = target_backend.full_attention_backend(target_attention_ask(s, head_size))
    if backend.name == "FLASH_ATTN":
        check_flash_attn_head_size(head_size)
    return backend


def target_attention_ask(s: TargetSettings, head_size: int) -> DrafterAsk:
    """What the target's ``Attention.__init__`` hands the selector (a causal decoder layer)."""
    return DrafterAsk(
        family=s.capability_family,
        head_size=head_size,
        kv_cache_dtype=s.kv_cache_dtype,
        model_dtype=s.model_dtype,
        non_causal=False,
        user_block_size=s.user_block_size,
        target_head_size=head_size,
        target_kv_cache_dtype=s.kv_cache_dtype,
        vllm=s.vllm,
    )


def check_cpu_attn(head_size: int, kv_cache_dtype: str) -> None:
    """What CPU_ATTN takes: its head sizes (vLLM raises for another), the model dtype's cache (fp8 is not
    modelled)."""
    if head_size not in B.CPU_ATTN_HEAD_SIZES:
        raise SimulatedError(
            "ValueError",
            f"CPU_ATTN does not take head size {head_size} (it takes {', '.join(map(str, B.CPU_ATTN_HEAD_SIZES))})",
        )
    if not B.CPU_ATTN.takes_kv_cache_dtype(kv_cache_dtype):
        raise BadInput(
            f"kv_cache_dtype {kv_cache_dtype!r} on the CPU platform is not modelled (CPU_ATTN's fp8 "
            f"caches depend on the CPU's instruction set; modelled: {', '.join(B.CPU_ATTN.kv_cache_dtypes)})"
        )


def kv_heads_per_rank(kv_heads: int, tp: int, what: str) -> int:
    """KV heads per TP rank, with vLLM's divisibility asserts (``what`` names the heads)."""
    if kv_heads >= tp:
        if kv_heads % tp:
            raise SimulatedError("AssertionError", f"{what} not divisible by TP")
    elif tp % kv_heads:
        raise SimulatedError("AssertionError", f"TP not divisible by {what}")
    return max(1, kv_heads // tp)


def customize_attention_spec(backend: B.Backend, spec: AttentionSpec) -> AttentionSpec:
    """vllm.v1.worker.utils.customize_attention_spec."""
    if backend.align_rows is not None:
        spec = replace(spec, block_stride_alignment=backend.align_rows * spec.state_content_size_bytes)
    if spec.block_stride_alignment is None and backend.fixed_sizes_only:
        spec = replace(spec, block_stride_alignment=B.Multiple(max(backend.kernel_block_sizes)))
    return spec


def attention_builder(proto: AttentionSpec, backend: B.Backend) -> SpecBuilder:
    """An attention layer at the cache block size."""
    return lambda cache: customize_attention_spec(backend, proto.with_block_size(cache.block_size))


def mamba_builder(state: MambaState, max_model_len: int) -> SpecBuilder:
    """A mamba layer: block ``mamba_block_size`` (``max_model_len`` when unset),
    page padded to the attention page."""
    return lambda cache: MambaSpec(
        block_size=cache.mamba_block_size or max_model_len,
        page_size_padded=cache.mamba_page_size_padded,
        state_bytes=state.bytes,
        shapes=state.shapes,
        dtypes=state.dtypes,
    )


def _largest_kernel_block_within(backend: B.Backend, per_token: int, budget: int, fallback: int) -> int:
    max_block = budget // per_token
    cands = [s for s in backend.kernel_block_sizes if isinstance(s, int)]
    cands += [
        max(s.base, max_block // s.base * s.base) for s in backend.kernel_block_sizes if isinstance(s, B.Multiple)
    ]
    if not cands:
        return fallback
    fitting = [b for b in cands if b * per_token <= budget]
    return max(fitting) if fitting else min(cands)


def drafter_attention_builder(proto: AttentionSpec, backend: B.Backend) -> SpecBuilder:
    """A full-attention layer takes the cache block; a sliding-window layer
    the largest kernel block of its backend within the cache block's bytes."""

    def build(cache: CacheConfig) -> KVCacheSpec:
        if isinstance(proto, SlidingWindowSpec):
            per_token = proto.with_block_size(1).real_page_size_bytes
            bs = _largest_kernel_block_within(backend, per_token, per_token * cache.block_size, cache.block_size)
        else:
            bs = cache.block_size
        return customize_attention_spec(backend, proto.with_block_size(bs))

    return build
