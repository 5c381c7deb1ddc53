"""Pure-Python (stdlib only) re-implementation of vLLM 0.33.0's KV-cache
geometry decisions for hybrid targets with an optional DFlash/DFlash2 drafter.

What it reproduces, in vLLM's order:

1. ``Glm5NextModelConfig.verify_and_update_config``: ``kv_cache_dtype="auto"`` on
   capability family 100 with a sparse indexer becomes ``fp8`` and a non-MTP
   drafter without its own dtype stays ``auto`` (= the model dtype, bf16).
2. The per-layer specs each layer's ``get_kv_cache_spec`` returns, after the
   runner's ``customize_attention_spec`` (``vllm/v1/worker/gpu/attn_utils.py``),
   for every target layer (KDA/GDN ``MambaSpec``; MLA latent, sparse-indexer
   keys and kpool tail ring for GLM-5.3; ``FullAttentionSpec`` for Qwen3-Next)
   and every drafter layer (``SlidingWindowSpec`` or ``FullAttentionSpec``).
3. ``Platform.update_block_size_for_backend``: phase 1 (common preferred block
   size of every non-SSM backend in layer order), phase 2
   (``_align_hybrid_block_size`` with the *first* non-SSM backend: for GLM-5.3
   that is the sparse indexer's backend) and the post-check
   ``_check_aligned_block_size``.
4. ``resolve_kv_cache_layout`` (KpoolTailBackend only takes BLHNC, which makes
   GLM-5.3 block-outermost; other models get LBNHC).
5. ``get_kv_cache_groups``: uniform spec / uniform type /
   ``_get_packed_kv_cache_groups`` (block-outermost) /
   ``unify_kv_cache_spec_page_size`` + ``_get_kv_cache_groups_uniform_page_size``.
6. ``get_kv_cache_config_from_groups``: ``validate_kv_cache_layout``, bytes per
   block (``_get_kv_cache_bytes_per_block`` including block-stride alignment),
   ``num_blocks = memory // bytes_per_block``.

Two behaviours are modelled: ``stock`` (pristine 0.33.0) and ``overlay`` (our
patch series, see geometry/OVERLAY_CONTRACT.md): after hybrid alignment fixes
the target block B, each drafter attention layer gets block ``P / bytes per
token`` where P is the MLA latent page at B, when that is an exact integer the
drafter backend supports; otherwise stock behaviour.

Backend choices are assumptions (vLLM's choice needs libcuda); see
geometry/backends.py for what is modelled per GPU family and why.

Where vLLM would raise, the report carries ``error`` (exception type and
message) instead of numbers.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping

try:  # package import (tests, oracle) or sibling import (CLI as a script)
    from . import backends as B
    from .inputs import BadInput, GeometryInputs
    from .prefix_cache import CacheGroup, PrefixCache, PrefixCacheError
    from .prefix_cache import resolve as resolve_prefix_cache
except ImportError:  # pragma: no cover - script mode
    import backends as B  # type: ignore[no-redef]
    from inputs import BadInput, GeometryInputs  # type: ignore[no-redef]
    from prefix_cache import CacheGroup, PrefixCache, PrefixCacheError  # type: ignore[no-redef]
    from prefix_cache import resolve as resolve_prefix_cache  # type: ignore[no-redef]

DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE

_DTYPE_BYTES = {
    "float32": 4, "float": 4,
    "bfloat16": 2, "float16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "uint8": 1,
}
_SUPPORTED_KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")


class cached_property:  # noqa: N801 - functools' without its per-instance lock
    """Computed on first read and stored in the instance ``__dict__`` (so
    later reads never reach the descriptor); works on frozen dataclasses."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        v = obj.__dict__[self.name] = self.fn(obj)
        return v


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(x: int, m: int) -> int:
    return cdiv(x, m) * m


def next_power_of_2(n: int) -> int:
    return 1 if n < 1 else 1 << (n - 1).bit_length()


class SimulatedError(Exception):
    """What vLLM would raise (type name kept in ``vllm_type``)."""

    def __init__(self, vllm_type: str, message: str):
        super().__init__(f"{vllm_type}: {message}")
        self.vllm_type = vllm_type
        self.message = message


# --------------------------------------------------------------------------
# Spec model (mirrors the fields of vLLM's KVCacheSpec dataclasses that decide
# page sizes, grouping and equality).


@dataclass(frozen=True)
class Spec:
    kind: str  # "mamba" | "mla" | "full" | "sliding" | "circular"
    block_size: int
    num_kv_heads: int = 0
    head_size: int = 0
    head_size_v: int = 0
    dtype_bytes: int = 0
    dtype: str = ""
    tokens_per_state: int = 1
    page_size_padded: int | None = None
    block_stride_alignment: Any = None  # None | int | B.Multiple
    sliding_window: int | None = None
    dcp_sharded: bool = True
    cache_role: str = "sparse"  # MLA specs: "sparse" | "indexer"
    state_bytes: int = 0  # mamba: real state bytes
    mamba_shapes: tuple = ()
    mamba_dtypes: tuple = ()
    is_draft: bool = field(default=False, compare=False)

    @property
    def is_attention(self) -> bool:
        return self.kind != "mamba"

    @property
    def num_states(self) -> int:
        if self.tokens_per_state > 0:
            return self.block_size // self.tokens_per_state
        return 1

    @cached_property
    def real_page_size_bytes(self) -> int:
        if self.kind == "mamba":
            return self.state_bytes
        return (self.num_kv_heads * self.num_states
                * (self.head_size + self.head_size_v) * self.dtype_bytes)

    @cached_property
    def page_size_bytes(self) -> int:
        real = self.real_page_size_bytes
        if self.page_size_padded is not None:
            if self.page_size_padded < real:
                raise SimulatedError("AssertionError", "page_size_padded < page size")
            return self.page_size_padded
        return real

    @property
    def bytes_per_token(self) -> int:
        """Unpadded bytes per token (attention specs)."""
        return (self.num_kv_heads * (self.head_size + self.head_size_v)
                * self.dtype_bytes) // max(self.tokens_per_state, 1)

    def with_block_size(self, block_size: int) -> "Spec":
        if block_size == self.block_size:
            return self
        memo = self.__dict__.get("_resized")
        if memo is None:
            memo = {}
            object.__setattr__(self, "_resized", memo)
        out = memo.get(block_size)
        if out is None:
            out = memo[block_size] = self.evolve(block_size=block_size)
        return out

    def evolve(self, **changes: Any) -> "Spec":
        """``dataclasses.replace`` without its per-field ``__init__`` cost
        (Spec has no ``__post_init__``; derived values are recomputed)."""
        d = self.__dict__.copy()
        for k in _SPEC_DERIVED:
            d.pop(k, None)
        d.update(changes)
        out = object.__new__(Spec)
        out.__dict__.update(d)
        return out

    def get_block_stride_alignment(self) -> int:
        return self._stride_alignment

    @cached_property
    def _stride_alignment(self) -> int:
        a = self.block_stride_alignment
        if not isinstance(a, B.Multiple):
            return a or 1
        k = math.gcd(a.base, self.block_size)
        if k == self.block_size:
            return 1
        return self.with_block_size(k).page_size_bytes

    @property
    def uniform_base(self) -> str:
        # KVCacheSpecRegistry: MLAAttentionSpec groups with FullAttentionSpec.
        return {"mla": "full"}.get(self.kind, self.kind)

    @property
    def vllm_class(self) -> str:
        return {
            "mamba": "MambaSpec", "mla": "MLAAttentionSpec",
            "full": "FullAttentionSpec", "sliding": "SlidingWindowSpec",
            "circular": "CircularBufferSpec",
        }[self.kind]


_SPEC_FIELDS = frozenset(f.name for f in fields(Spec))
# what Spec caches in its __dict__ besides its fields (never copied by evolve)
_SPEC_DERIVED = ("real_page_size_bytes", "page_size_bytes", "_stride_alignment", "_resized")


def _uniform_with_collection(first: Spec, specs: list[Spec]) -> bool:
    if first.kind == "sliding":
        return all(s.kind == "sliding" and s.sliding_window == first.sliding_window
                   for s in specs)
    if first.kind == "circular":
        return all(s.kind == "circular" for s in specs)
    if first.kind == "mamba":
        return all(s.kind == "mamba" and s.page_size_bytes == first.page_size_bytes
                   for s in specs)
    base = first.uniform_base
    return all(s.uniform_base == base for s in specs)


def is_uniform_type(specs: list[Spec]) -> bool:
    if len({s.block_size for s in specs}) > 1:
        return False
    if len({s.dcp_sharded for s in specs}) > 1:
        return False
    return _uniform_with_collection(specs[0], specs)


# --------------------------------------------------------------------------
# Report dataclasses


@dataclass(frozen=True)
class LayerRow:
    name: str
    owner: str  # "target" | "drafter"
    role: str  # kda | gdn | mla_latent | sparse_indexer | kpool_tail | attention | sliding_window
    spec_class: str
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: str
    bytes_per_token: int
    real_page_bytes: int
    page_bytes: int
    padded: bool
    block_stride_alignment: int


@dataclass(frozen=True)
class GroupRow:
    index: int
    spec_class: str
    roles: tuple[str, ...]
    layer_names: tuple[str, ...]
    block_size: int
    bytes: int  # sum of the group's layer pages (one block of this group)
    is_draft: bool


class _Thunk:
    """A deferred value for a ``_Lazy`` field."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


class _Lazy:
    """A dataclass field (no default) whose value may be given as a ``_Thunk``
    and is then computed on first read (``getattr``, ``asdict``, ``==`` and
    ``repr`` all read it).  The per-layer and per-group rows of the plans the
    gate does not look at are never built."""

    def __set_name__(self, owner, name):
        self.slot = "_lazy_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return MISSING  # dataclasses: the field has no default
        d = obj.__dict__
        v = d[self.slot]
        if type(v) is _Thunk:
            v = d[self.slot] = v.fn()
        return v

    def __set__(self, obj, value):
        obj.__dict__[self.slot] = value


@dataclass(frozen=True)
class Plan:
    """One planning run (with or without the drafter)."""

    block_size: int | None  # cache_config.block_size after alignment
    mamba_page_size_padded: int | None
    layout: str | None
    grouping_path: str | None  # uniform | uniform_type | packed | unified
    layers: tuple[LayerRow, ...] = _Lazy()
    groups: tuple[GroupRow, ...] = _Lazy()
    bytes_per_block: int | None
    num_blocks: int | None
    tokens_fit: int | None  # num_blocks * target attention block size
    target_attention_page: int | None  # MLA latent (or full attn) real page
    error: str | None = None
    prefix_cache: PrefixCache | None = None  # None when vLLM cannot plan


@dataclass(frozen=True)
class GeometryReport:
    behaviour: str
    model_kind: str
    capability_family: int
    tensor_parallel_size: int
    num_speculative_tokens: int
    target_kv_dtype: str
    drafter_kv_dtype: str | None
    backends: tuple[str, ...]
    kernel_block_alignment: int | None  # min kernel block of the first backend
    drafter_backend: str | None
    drafter_kernel_block: int | None
    with_drafter: Plan
    without_drafter: Plan  # same flags, no drafter, num_speculative_tokens 0
    target_only_same_spec: Plan  # no drafter layers, same num_spec
    kv_cache_memory_bytes: int
    notes: tuple[str, ...] = ()

    # convenient aliases of the with-drafter figures
    @property
    def layers(self) -> tuple[LayerRow, ...]:
        return self.with_drafter.layers

    @property
    def groups(self) -> tuple[GroupRow, ...]:
        return self.with_drafter.groups

    @property
    def bytes_per_block(self) -> int | None:
        return self.with_drafter.bytes_per_block

    @property
    def num_blocks(self) -> int | None:
        return self.with_drafter.num_blocks

    @property
    def tokens_fit(self) -> int | None:
        return self.with_drafter.tokens_fit


# --------------------------------------------------------------------------
# Model description


def _text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    tc = cfg.get("text_config")
    return tc if isinstance(tc, Mapping) else cfg


def _req(cfg: Mapping[str, Any], key: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise BadInput(f"config lacks {key!r}")
    return cfg[key]


def model_kind(cfg: Mapping[str, Any]) -> str:
    archs = list(cfg.get("architectures") or [])
    mt = str(_text_config(cfg).get("model_type", cfg.get("model_type", "")))
    if any(a.startswith("Glm5Next") for a in archs) or mt.startswith("glm5_next"):
        return "glm5next"
    if "Qwen3NextForCausalLM" in archs or mt == "qwen3_next":
        return "qwen3_next"
    if "KimiLinearForCausalLM" in archs or mt == "kimi_linear":
        return "kimi_linear"
    raise BadInput(f"target architecture {archs or mt!r} is not modelled "
                   "(modelled: Glm5NextForCausalLM, Qwen3NextForCausalLM, "
                   "KimiLinearForCausalLM)")


def _model_dtype(cfg: Mapping[str, Any]) -> str:
    tc = _text_config(cfg)
    d = tc.get("dtype") or tc.get("torch_dtype") or cfg.get("dtype") or cfg.get("torch_dtype")
    d = str(d or "bfloat16").replace("torch.", "")
    if d not in ("bfloat16", "float16", "float32"):
        raise BadInput(f"model dtype {d!r} not modelled")
    return d


_TORCH_STORAGE = {"fp8": "uint8", "fp8_e4m3": "uint8", "fp8_e5m2": "uint8", "half": "float16"}


def _kv_dtype_name(kv: str, model_dtype: str) -> str:
    """The torch storage dtype vLLM uses for a cache-dtype string
    (``STR_DTYPE_TO_TORCH_DTYPE``; "auto" is the model dtype)."""
    if kv not in _SUPPORTED_KV_DTYPES:
        raise BadInput(f"KV cache dtype {kv!r} not modelled (supported: {_SUPPORTED_KV_DTYPES})")
    return model_dtype if kv == "auto" else _TORCH_STORAGE.get(kv, kv)


def resolve_kv_dtypes(inputs: GeometryInputs, kind: str) -> tuple[str, str | None]:
    """Cache-dtype *strings* after Glm5NextModelConfig's auto rule."""
    target = inputs.kv_cache_dtype
    drafter = inputs.drafter_kv_cache_dtype if inputs.has_drafter else None
    tc = _text_config(inputs.target_config)
    if (kind == "glm5next" and target == "auto" and inputs.capability_family == 100
            and tc.get("index_topk") is not None):
        target = "fp8"
        if inputs.has_drafter and drafter is None:  # method "dflash" != "mtp"
            drafter = "auto"
    if inputs.has_drafter and drafter is None:
        drafter = target
    return target, drafter


class _Layer:
    """One layer: its name, owner, role and ``slot``; the model maps the slot
    to the layer's backend and spec builder.  Layer lists depend only on the
    layer pattern, so they are cached across models (``_layer_list``)."""

    __slots__ = ("name", "owner", "role", "slot")

    def __init__(self, name: str, owner: str, role: str, slot: str):
        self.name, self.owner, self.role, self.slot = name, owner, role, slot


_LAYER_LISTS: dict[tuple, tuple[_Layer, ...]] = {}


def _layer_list(key: tuple, make) -> tuple[_Layer, ...]:
    """``make()`` -> iterable of (name, owner, role, slot), cached by ``key``."""
    out = _LAYER_LISTS.get(key)
    if out is None:
        if len(_LAYER_LISTS) > 4096:
            _LAYER_LISTS.clear()
        out = _LAYER_LISTS[key] = tuple(_Layer(*t) for t in make())
    return out


@dataclass
class _Cache:
    block_size: int
    user_specified: bool
    mamba_page_size_padded: int | None = None
    mamba_block_size: int | None = None


def _mamba_spec_kda(tc, tp, num_spec, model_dtype) -> tuple[tuple, tuple, int]:
    return _kda_state(_req(tc, "linear_num_heads"), _req(tc, "linear_head_dim"),
                      tc.get("linear_conv_kernel_dim", 4), tp, num_spec, model_dtype)


def _kda_state(heads, hd, k, tp, num_spec, model_dtype) -> tuple[tuple, tuple, int]:
    """MambaStateShapeCalculator.kda_state_shape / kda_state_dtype (conv state
    in the model dtype, recurrent state fp32)."""
    if heads % tp:
        raise SimulatedError("AssertionError", f"linear_num_heads {heads} not divisible by TP {tp}")
    conv_dim = heads * hd + 2 * heads * hd
    if conv_dim % tp:
        raise SimulatedError("AssertionError", "conv_dim not divisible by TP")
    conv = (conv_dim // tp, k - 1 + num_spec)
    rec = (heads // tp, hd, hd)
    conv_b = _DTYPE_BYTES[model_dtype]
    total = conv[0] * conv[1] * conv_b + rec[0] * rec[1] * rec[2] * 4
    return (conv, rec), (model_dtype, "float32"), total


def _mamba_spec_gdn(tc, tp, num_spec, model_dtype) -> tuple[tuple, tuple, int]:
    nk = _req(tc, "linear_num_key_heads")
    nv = _req(tc, "linear_num_value_heads")
    dk = _req(tc, "linear_key_head_dim")
    dv = _req(tc, "linear_value_head_dim")
    k = tc.get("linear_conv_kernel_dim", 4)
    conv_dim = dk * nk * 2 + dv * nv
    if conv_dim % tp or nv % tp:
        raise SimulatedError("AssertionError", "GDN dims not divisible by TP")
    conv = (conv_dim // tp, k - 1 + num_spec)
    temporal = (nv // tp, dv, dk)
    b = _DTYPE_BYTES[model_dtype]
    total = conv[0] * conv[1] * b + temporal[0] * temporal[1] * temporal[2] * b
    return (conv, temporal), (model_dtype, model_dtype), total


def _check_flash_attn_head_size(head_size: int) -> None:
    if head_size == 256:
        raise BadInput("FLASH_ATTN with head size 256 (FA4 hd256 pages) is not modelled")


def _kv_heads_per_rank(kv_heads: int, tp: int, what: str) -> int:
    """KV heads per TP rank, with vLLM's divisibility asserts (``what`` names the heads)."""
    if kv_heads >= tp:
        if kv_heads % tp:
            raise SimulatedError("AssertionError", f"{what} not divisible by TP")
    elif tp % kv_heads:
        raise SimulatedError("AssertionError", f"TP not divisible by {what}")
    return max(1, kv_heads // tp)


def _drafter_layer_attention(dc: Mapping[str, Any], idx: int) -> int | None:
    """``_resolve_layer_attention``: the sliding window of drafter layer idx."""
    dflash = dc.get("dflash_config") or {}
    layer_types = dc.get("layer_types")
    use_swa = dflash.get("use_swa", False)
    any_sliding = False
    if layer_types is not None:
        n_sl = sum(t == "sliding_attention" for t in layer_types)
        any_sliding = n_sl > 0
        if 0 < n_sl < len(layer_types):
            raise BadInput("mixed sliding/full DFlash drafters need the V2 runner "
                           "and several drafter groups; not modelled")
    if layer_types is None or (use_swa and not any_sliding):
        is_sliding = use_swa
    else:
        is_sliding = layer_types[idx] == "sliding_attention"
    if not is_sliding:
        return None
    window = dflash.get("swa_window_size", dc.get("sliding_window"))
    if window is None:
        raise SimulatedError("ValueError", "DFlash sliding attention requires a window size")
    return int(window)


def _largest_kernel_block_within(backend: B.Backend, per_token: int, budget: int,
                                 fallback: int) -> int:
    max_block = budget // per_token
    cands = [s for s in backend.kernel_block_sizes if isinstance(s, int)]
    cands += [max(s.base, max_block // s.base * s.base)
              for s in backend.kernel_block_sizes if isinstance(s, B.Multiple)]
    if not cands:
        return fallback
    fitting = [b for b in cands if b * per_token <= budget]
    return max(fitting) if fitting else min(cands)


def _customize(backend: B.Backend, spec: Spec) -> Spec:
    """vllm.v1.worker.utils.customize_attention_spec."""
    if backend.align_rows is not None:
        content = (spec.head_size + spec.head_size_v) * spec.dtype_bytes
        spec = spec.evolve(block_stride_alignment=backend.align_rows * content)
    if spec.block_stride_alignment is None and backend.fixed_sizes_only:
        spec = spec.evolve(block_stride_alignment=B.Multiple(max(backend.kernel_block_sizes)))
    return spec


class _Model:
    """Layers (in vLLM's registration order) and model-level facts."""

    def __init__(self, inputs: GeometryInputs, with_drafter: bool, num_spec: int):
        self.inputs = inputs
        self.kind = model_kind(inputs.target_config)
        self.tc = _text_config(inputs.target_config)
        self.tp = inputs.tensor_parallel_size
        self.family = inputs.capability_family
        self.num_spec = num_spec
        self.model_dtype = _model_dtype(inputs.target_config)
        kv_t, kv_d = resolve_kv_dtypes(inputs, self.kind)
        self.kv_target = kv_t
        self.kv_drafter = kv_d if with_drafter else None
        self.layers: list[_Layer] = []
        self.max_model_len = inputs.max_model_len or int(
            self.tc.get("max_position_embeddings", 0) or 0) or 1
        tc, tp = self.tc, self.tp
        t_dtype = _kv_dtype_name(kv_t, self.model_dtype)
        n_layers = int(_req(tc, "num_hidden_layers"))
        layer_types = list(tc.get("layer_types") or [])

        if self.kind == "glm5next":
            if not layer_types:
                layer_types = ["linear_attention" if i % 4 != 3 else "indexed_attention"
                               for i in range(n_layers)]
            self.use_mla = True
            kv_lora = int(_req(tc, "kv_lora_rank"))
            rope = int(tc.get("qk_rope_head_dim", 0) or 0)
            self.head_size = kv_lora + rope
            self.num_kv_heads_model = 1
            self.has_indexer = tc.get("index_topk") is not None
            kpool = int(tc.get("index_kpool", 16))
            idx_hd = int(tc.get("index_head_dim", 128))
            shapes, dtypes, mamba_bytes = _mamba_spec_kda(tc, tp, num_spec, self.model_dtype)
            self.mamba_shapes, self.mamba_dtypes = shapes, dtypes
            self.mamba_page = mamba_bytes
            if int(_req(tc, "num_attention_heads")) % tp:
                raise SimulatedError("AssertionError", "num_attention_heads must be divisible by world_size")
            if self.has_indexer and kpool <= 1:
                raise SimulatedError("AssertionError", "Glm5NextIndexerCache expects index_kpool > 1")
            try:
                mla_backend = B.sparse_mla_backend(self.family) if self.has_indexer else None
            except ValueError as exc:
                raise BadInput(str(exc)) from exc
            if mla_backend is None:
                raise BadInput("GLM-5.3 without a sparse indexer (dense MLA) is not modelled")
            idx_backend = B.glm5_indexer_backend(kpool, self.family)
            t_bytes = _DTYPE_BYTES[t_dtype]
            idx_spec = Spec("mla", 0, num_kv_heads=1, head_size=idx_hd + idx_hd // 128 * 4,
                            head_size_v=0, dtype_bytes=1, dtype="uint8",
                            tokens_per_state=kpool, cache_role="indexer")
            idx_build = self._make_attn_builder(idx_spec, idx_backend)
            tail_build = self._make_tail_builder(kpool, idx_hd)
            mla_spec = Spec("mla", 0, num_kv_heads=1, head_size=self.head_size, head_size_v=0,
                            dtype_bytes=t_bytes, dtype=t_dtype)
            mla_build = self._make_attn_builder(mla_spec, mla_backend)
            self.slots = {"kda": (B.SSM, self._mamba_build), "idx": (idx_backend, idx_build),
                          "tail": (B.KPOOL_TAIL, tail_build), "mla": (mla_backend, mla_build)}

            def glm_layers():
                for i in range(n_layers):
                    lt = layer_types[i]
                    p = f"model.layers.{i}.self_attn"
                    if lt == "linear_attention":
                        yield p, "target", "kda", "kda"
                        continue
                    yield p + ".indexer.k_cache", "target", "sparse_indexer", "idx"
                    yield p + ".indexer.tail_cache", "target", "kpool_tail", "tail"
                    yield p + ".mla_attn", "target", "mla_latent", "mla"
            self.layers.extend(_layer_list(
                ("glm5next", n_layers, tuple(layer_types)), glm_layers))
        elif self.kind == "kimi_linear":
            self._kimi_layers(tc, tp, num_spec, t_dtype)
        else:  # qwen3_next
            if not layer_types:
                interval = int(tc.get("full_attention_interval", 4))
                layer_types = ["linear_attention" if (i + 1) % interval else "full_attention"
                               for i in range(n_layers)]
            self.use_mla = False
            heads = int(_req(tc, "num_attention_heads"))
            kvh = int(tc.get("num_key_value_heads", heads))
            self.head_size = int(tc.get("head_dim") or int(_req(tc, "hidden_size")) // heads)
            _check_flash_attn_head_size(self.head_size)
            self.num_kv_heads_model = _kv_heads_per_rank(kvh, tp, "num_key_value_heads")
            shapes, dtypes, mamba_bytes = _mamba_spec_gdn(tc, tp, num_spec, self.model_dtype)
            self.mamba_shapes, self.mamba_dtypes = shapes, dtypes
            self.mamba_page = mamba_bytes
            t_bytes = _DTYPE_BYTES[t_dtype]
            spec = Spec("full", 0, num_kv_heads=self.num_kv_heads_model,
                        head_size=self.head_size, head_size_v=self.head_size,
                        dtype_bytes=t_bytes, dtype=t_dtype)
            attn_build = self._make_attn_builder(spec, B.FLASH_ATTN)
            self.slots = {"gdn": (B.SSM, self._mamba_build), "attn": (B.FLASH_ATTN, attn_build)}

            def qwen_layers():
                for i in range(n_layers):
                    lt = layer_types[i]
                    p = f"model.layers.{i}"
                    if lt == "linear_attention":
                        yield p + ".linear_attn", "target", "gdn", "gdn"
                    else:
                        yield p + ".self_attn.attn", "target", "attention", "attn"
            self.layers.extend(_layer_list(
                ("qwen3_next", n_layers, tuple(layer_types)), qwen_layers))

        self.drafter_backend: B.Backend | None = None
        if with_drafter and inputs.drafter_config is not None:
            dc = inputs.drafter_config
            try:
                self.drafter_backend = B.drafter_backend(inputs.drafter_attention_backend)
            except ValueError as exc:
                raise BadInput(str(exc)) from exc
            d_dtype = _kv_dtype_name(self.kv_drafter, self.model_dtype)
            d_heads = int(_req(dc, "num_attention_heads"))
            d_kv = int(dc.get("num_key_value_heads", d_heads) or d_heads)
            d_hd = int(dc.get("head_dim") or int(_req(dc, "hidden_size")) // d_heads)
            _check_flash_attn_head_size(d_hd)
            d_kv_local = _kv_heads_per_rank(d_kv, tp, "drafter KV heads")
            if (d_heads // tp) % d_kv_local:
                raise SimulatedError("AssertionError", "drafter num_heads not divisible by num_kv_heads")
            windows = tuple(_drafter_layer_attention(dc, i)
                            for i in range(int(_req(dc, "num_hidden_layers"))))
            for window in dict.fromkeys(windows):
                spec = Spec("sliding" if window is not None else "full", 0,
                            num_kv_heads=d_kv_local, head_size=d_hd, head_size_v=d_hd,
                            dtype_bytes=_DTYPE_BYTES[d_dtype], dtype=d_dtype,
                            sliding_window=window, is_draft=True)
                self.slots[("drafter", window)] = (self.drafter_backend,
                                                   self._make_drafter_builder(spec))

            def drafter_layers():
                for i, window in enumerate(windows):
                    yield (f"drafter.model.layers.{i}.self_attn.attn", "drafter",
                           "sliding_window" if window is not None else "attention",
                           ("drafter", window))
            self.layers.extend(_layer_list(("drafter", windows), drafter_layers))

    def _kimi_layers(self, tc, tp: int, num_spec: int, t_dtype: str) -> None:
        """KimiLinearModel (vllm/models/kimi_k3): layer i is KDA iff i + 1 is in
        ``linear_attn_config["kda_layers"]``, otherwise dense NoPE MLA; both
        register as ``model.layers.{i}.self_attn``."""
        lac = tc.get("linear_attn_config")
        if not isinstance(lac, Mapping):
            raise BadInput("Kimi Linear config lacks 'linear_attn_config'")
        kda_layers = lac.get("kda_layers")
        if kda_layers is None or lac.get("full_attn_layers") is None:
            raise BadInput("linear_attn_config needs 'kda_layers' and 'full_attn_layers'")
        if not kda_layers:
            raise BadInput("Kimi Linear without KDA layers (not hybrid) is not modelled")
        if lac.get("use_full_rank_gate"):
            raise BadInput("Kimi-K3 full-rank-gate KDA is not modelled")
        kda_set = {int(x) for x in kda_layers}
        n_layers = int(_req(tc, "num_hidden_layers"))
        for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"):
            _req(tc, key)
        self.use_mla = True
        kv_lora = int(tc["kv_lora_rank"])
        rope = int(tc["qk_rope_head_dim"])
        self.head_size = kv_lora + rope
        self.num_kv_heads_model = 1
        shapes, dtypes, mamba_bytes = _kda_state(
            int(_req(lac, "num_heads")), int(_req(lac, "head_dim")),
            int(lac.get("short_conv_kernel_size", 4)), tp, num_spec, self.model_dtype)
        self.mamba_shapes, self.mamba_dtypes = shapes, dtypes
        self.mamba_page = mamba_bytes
        has_mla = any(i + 1 not in kda_set for i in range(n_layers))
        if has_mla and not tc.get("mla_use_nope"):
            raise SimulatedError("AssertionError", "Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only")
        try:
            mla_backend = B.dense_mla_backend(self.family, self.kv_target,
                                              int(tc["qk_nope_head_dim"]), self.head_size)
        except ValueError as exc:
            raise BadInput(str(exc)) from exc
        mla_spec = Spec("mla", 0, num_kv_heads=1, head_size=self.head_size, head_size_v=0,
                        dtype_bytes=_DTYPE_BYTES[t_dtype], dtype=t_dtype)
        mla_build = self._make_attn_builder(mla_spec, mla_backend)
        self.slots = {"kda": (B.SSM, self._mamba_build), "mla": (mla_backend, mla_build)}

        def kimi_layers():
            for i in range(n_layers):
                p = f"model.layers.{i}.self_attn"
                if i + 1 in kda_set:
                    yield p, "target", "kda", "kda"
                else:
                    yield p, "target", "mla_latent", "mla"
        self.layers.extend(_layer_list(
            ("kimi_linear", n_layers, tuple(sorted(kda_set))), kimi_layers))

    # -- per-layer get_kv_cache_spec (+ customize_attention_spec) ----------
    @cached_property
    def _mamba_build(self):
        return self._mamba_builder

    def _mamba_builder(self, cache: _Cache) -> Spec:
        key = (cache.mamba_block_size, cache.mamba_page_size_padded)
        memo = self.__dict__.setdefault("_mamba_memo", {})
        out = memo.get(key)
        if out is None:
            out = memo[key] = self._new_mamba_spec(cache)
        return out

    def _new_mamba_spec(self, cache: _Cache) -> Spec:
        return Spec("mamba", cache.mamba_block_size or self.max_model_len,
                    page_size_padded=cache.mamba_page_size_padded,
                    state_bytes=self.mamba_page, mamba_shapes=self.mamba_shapes,
                    mamba_dtypes=self.mamba_dtypes, dcp_sharded=False)

    def _shared(self, key, factory):
        cache = self.__dict__.setdefault("_builder_cache", {})
        if key not in cache:
            cache[key] = factory()
        return cache[key]

    def _attn_builder(self, proto: Spec, backend: B.Backend):
        return self._shared(("attn", proto, backend), lambda: self._make_attn_builder(proto, backend))

    def _make_attn_builder(self, proto: Spec, backend: B.Backend):
        memo: dict[int, Spec] = {}

        def build(cache: _Cache) -> Spec:
            out = memo.get(cache.block_size)
            if out is None:
                out = memo[cache.block_size] = _customize(
                    backend, proto.with_block_size(cache.block_size))
            return out
        return build

    def _tail_builder(self, kpool: int, head_dim: int):
        return self._shared(("tail", kpool, head_dim), lambda: self._make_tail_builder(kpool, head_dim))

    def _make_tail_builder(self, kpool: int, head_dim: int):
        def build(cache: _Cache) -> Spec:
            span = kpool + self.num_spec
            ring = kpool * next_power_of_2(cdiv(span, kpool))
            if cache.block_size % ring:
                raise SimulatedError(
                    "AssertionError",
                    f"Glm5NextTailCache: cache_config.block_size ({cache.block_size}) "
                    f"must be a multiple of the tail ring ({ring})")
            return _customize(B.KPOOL_TAIL, Spec(
                "circular", ring, num_kv_heads=2, head_size=head_dim, head_size_v=0,
                dtype_bytes=2, dtype="bfloat16", dcp_sharded=False))
        return build

    def _drafter_builder(self, proto: Spec):
        return self._shared(("drafter", proto), lambda: self._make_drafter_builder(proto))

    def _make_drafter_builder(self, proto: Spec):
        backend = self.drafter_backend
        assert backend is not None

        def build(cache: _Cache) -> Spec:
            if proto.kind == "sliding":
                per_token = proto.with_block_size(1).real_page_size_bytes
                bs = _largest_kernel_block_within(backend, per_token,
                                                  per_token * cache.block_size,
                                                  cache.block_size)
            else:
                bs = cache.block_size
            return _customize(backend, proto.with_block_size(bs))
        return build

    # -- model-level facts used by _align_hybrid_block_size -----------------
    def attn_page_1_token(self) -> int:
        t_dtype = _kv_dtype_name(self.kv_target, self.model_dtype)
        if self.use_mla:
            return self.head_size * _DTYPE_BYTES[t_dtype]
        return self.num_kv_heads_model * 2 * self.head_size * _DTYPE_BYTES[t_dtype]

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
        out = self.__dict__.get("_non_ssm")
        if out is None:
            out = []
            seen: set[int] = set()
            slots = self.slots
            for layer in self.layers:
                b = slots[layer.slot][0]
                if id(b) in seen:
                    continue
                seen.add(id(b))
                if not b.is_ssm and b not in out:
                    out.append(b)
            self._non_ssm = out
        return out  # callers only read it

    def used_slots(self) -> list:
        """The slots the layers use, in first-use order (vLLM's build order)."""
        out = self.__dict__.get("_used_slots")
        if out is None:
            out = self._used_slots = list(dict.fromkeys(l.slot for l in self.layers))
        return out

    def target_only(self) -> "_Model":
        """The same model without the drafter's layers (same num_spec, same
        target layers and builders: nothing of the target depends on them)."""
        m = object.__new__(_Model)
        m.__dict__.update(self.__dict__)
        for k in ("_non_ssm", "_roles", "_builder_cache", "_used_slots"):
            m.__dict__.pop(k, None)
        m.layers = [l for l in self.layers if l.owner == "target"]
        m.kv_drafter = None
        m.drafter_backend = None
        return m


# --------------------------------------------------------------------------
# Platform.update_block_size_for_backend


def _update_block_size(model: _Model, inputs: GeometryInputs) -> _Cache:
    user = inputs.block_size is not None
    cache = _Cache(block_size=inputs.block_size or DEFAULT_BLOCK_SIZE, user_specified=user)
    backends = model.non_ssm_backends()
    if not backends:
        return cache
    if not user:
        if len(backends) == 1:
            cache.block_size = backends[0].preferred_block_size(DEFAULT_BLOCK_SIZE)
        elif all(b.supports_block_size(DEFAULT_BLOCK_SIZE) for b in backends):
            cache.block_size = DEFAULT_BLOCK_SIZE
        else:
            per_backend = [[s.base if isinstance(s, B.Multiple) else s
                            for s in b.kernel_block_sizes] or [1] for b in backends]
            import itertools
            cands = sorted({math.lcm(*c) for c in itertools.product(*per_backend)})
            for c in cands:
                if all(b.supports_block_size(c) for b in backends):
                    cache.block_size = c
                    break
            else:
                raise SimulatedError("ValueError", "The attention backends share no supported KV cache block size")
    pre = cache.block_size
    # phase 2: _align_hybrid_block_size with backends[0]
    attn_1 = model.attn_page_1_token()
    mamba_page = model.mamba_page
    if mamba_page:
        first = backends[0]
        kba = max(first.min_kernel_block, cache.block_size)
        bba = math.lcm(*(b.min_kernel_block for b in backends if b.kernel_block_sizes))
        if model.use_mla:
            kba = max(kba, 128)
        if inputs.mamba_cache_mode == "align":
            # internal prefill checkpoints land on block boundaries
            kba = math.lcm(kba, model.prefill_checkpoint_alignment() or 1)
        attn_block = kba * cdiv(mamba_page, kba * attn_1)
        attn_block = bba * cdiv(attn_block, bba)
        if cache.block_size < attn_block:
            cache.block_size = attn_block
        attn_page = cache.block_size * attn_1
        if attn_page != mamba_page:
            cache.mamba_page_size_padded = attn_page
    # _check_aligned_block_size
    if cache.block_size != pre:
        rejecting = [b.name for b in backends if not b.supports_block_size(cache.block_size)]
        if rejecting:
            raise SimulatedError("ValueError", f"Aligned KV cache block size {cache.block_size} "
                                 f"is not supported by attention backend(s): {', '.join(rejecting)}.")
    # MambaModelConfig / _align_hybrid_block_size: the attention block with
    # prefix caching ("align"), else max_model_len ("none").
    cache.mamba_block_size = (cache.block_size if inputs.mamba_cache_mode == "align"
                              else model.max_model_len)
    return cache


# --------------------------------------------------------------------------
# grouping


def _resolve_layout(model: _Model, specs: dict[str, Spec]) -> str:
    declared = [b.layouts for b in model.non_ssm_backends() if b.layouts is not None]
    if not declared:
        cands = list(B.DEFAULT_LAYOUT_PREFERENCE)
    elif all(d == declared[0] for d in declared):
        cands = list(declared[0])
    else:
        common = set.intersection(*map(set, declared))
        prio = Counter(d[0] for d in declared)
        cands = sorted((l for l in B.LAYOUTS if l in common), key=lambda l: prio[l], reverse=True)
        if not cands:
            raise SimulatedError("ValueError", "no KV cache layout every backend supports")
    uniq = list({id(s): s for s in specs.values()}.values())
    shapes = {(s.num_kv_heads if s.is_attention else 1, s.num_states if s.is_attention else 1,
               s.page_size_bytes) for s in uniq}
    if len(shapes) > 1:
        cands = [l for l in cands if B.layout_is_block_compact(l)]
        if not cands:
            raise SimulatedError("ValueError", "Specs with mixed HNC shapes need a block-compact layout")
    dcp = {s.dcp_sharded for s in uniq if s.is_attention and s.kind != "circular"}
    if len(dcp) > 1 and len({s.page_size_bytes for s in uniq}) > 1:
        cands = [l for l in cands if B.layout_is_block_outermost(l)]
        if not cands:
            raise SimulatedError("ValueError", "DCP with a replicated draft needs a block-outer layout")
    return cands[0]


def _packed_groups(specs: dict[str, Spec]) -> list[tuple[list[str], list[Spec]]] | None:
    # A bucket is already uniform and every uniformity rule compares members
    # with its first spec, so testing a newcomer against the first is enough.
    buckets: list[dict[str, Spec]] = []
    psls: list[dict[int, list[str]]] = []  # per bucket: page size -> layer names
    firsts: list[Spec] = []
    placed: dict[int, tuple] = {}  # id(spec) -> (bucket, its names for the spec's page)
    for name, spec in specs.items():
        hit = placed.get(id(spec))
        if hit is None:
            for k, first in enumerate(firsts):
                if (spec.block_size == first.block_size and spec.dcp_sharded == first.dcp_sharded
                        and _uniform_with_collection(first, [spec])):
                    break
            else:
                k = len(buckets)
                buckets.append({})
                psls.append({})
                firsts.append(spec)
            hit = placed[id(spec)] = (buckets[k],
                                      psls[k].setdefault(spec.page_size_bytes, []))
        hit[0][name] = spec
        hit[1].append(name)

    bucketed = []
    for bucket, psl in zip(buckets, psls):
        balanced = len({len(v) for v in psl.values()}) == 1
        max_per_page = max(len(v) for v in psl.values())
        bucketed.append((bucket, psl, balanced, max_per_page))

    min_repeats = max((mpp for _, psl, bal, mpp in bucketed if bal and len(psl) > 1), default=0)
    if min_repeats:
        values = [mpp for _, _, bal, mpp in bucketed if bal]
        best_d, best_pad = min_repeats, None
        for d in range(min_repeats, max(values) + 1):
            pad = sum((d - (x % d)) % d for x in values)
            if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
                best_pad, best_d = pad, d
        repeats = best_d if min_repeats <= max(values) else min_repeats
    else:
        repeats = None

    def num_groups_for(mpp: int, balanced: bool) -> int:
        return cdiv(mpp, repeats) if (balanced and repeats is not None) else 1

    def widest(psl: dict[int, list[str]], n: int) -> int:
        return sum(cdiv(len(names), n) * page for page, names in psl.items())

    def is_state(bucket: dict[str, Spec]) -> bool:
        first = next(iter(bucket.values()))
        if first.kind in ("mamba", "circular"):
            return True
        return repeats is None and first.kind == "sliding"

    anchor = max((widest(psl, len(bucket) if is_state(bucket) else num_groups_for(mpp, bal))
                  for bucket, psl, bal, mpp in bucketed), default=0)
    groups = []
    for bucket, psl, bal, mpp in bucketed:
        n = num_groups_for(mpp, bal)
        if anchor and is_state(bucket):
            per_block = max(anchor // next(iter(bucket.values())).page_size_bytes, 1)
            n = max(n, cdiv(len(bucket), per_block))
        if n == 1:
            groups.append((list(bucket), list(bucket.values())))
            continue
        pattern = list(zip(*psl.values()))
        for i in range(n):
            names = [nm for rep in pattern[i::n] for nm in rep]
            groups.append((names, [bucket[nm] for nm in names]))
    return groups


def _mergeable(a: Spec, b: Spec) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "full":
        return a.evolve(sliding_window=None) == b.evolve(sliding_window=None) and (
            a.sliding_window is None or b.sliding_window is None or a.sliding_window == b.sliding_window)
    if a.kind == "sliding":
        return False if a != b else True
    return a == b


def _unify(specs: dict[str, Spec]) -> dict[str, Spec]:
    pages = {s.page_size_bytes for s in specs.values()}
    if len(pages) <= 1:
        return specs
    mx = max(pages)
    out = {}
    for name, s in specs.items():
        if s.page_size_bytes == mx:
            out[name] = s
        elif s.kind == "mamba":
            out[name] = s.evolve(page_size_padded=mx)
        elif mx % s.page_size_bytes == 0:
            out[name] = s.with_block_size(s.block_size * (mx // s.page_size_bytes))
        elif s.kind != "mla":
            out[name] = s.evolve(page_size_padded=mx)
        else:
            raise SimulatedError(
                "NotImplementedError",
                f"Layer {name}: page size is not divisible by the maximum page size "
                "and cannot be padded. Padding is only supported for non-MLA attention layers.")
    return out


def _uniform_page_groups(specs: dict[str, Spec]) -> list[tuple[list[str], list[Spec]]]:
    # Layers grouped by equal spec, in first-occurrence order (a dict keyed by
    # Spec), with the equality tests done once per distinct spec object.
    reps: list[Spec] = []
    cls_of: dict[int, int] = {}
    for sp in specs.values():
        if id(sp) not in cls_of:
            for k, r in enumerate(reps):
                if r == sp:
                    break
            else:
                k = len(reps)
                reps.append(sp)
            cls_of[id(sp)] = k
    members: list[list[str]] = [[] for _ in reps]
    for name, sp in specs.items():
        members[cls_of[id(sp)]].append(name)
    same = zip(reps, members)
    layer_buckets: list[list[str]] = []
    spec_buckets: list[list[Spec]] = []
    for s, names in same:
        for lb, sb in zip(layer_buckets, spec_buckets):
            if all(_mergeable(sb[0], x) for x in sb + [s]):
                lb.extend(names)
                sb.append(s)
                break
        else:
            layer_buckets.append(list(names))
            spec_buckets.append([s])
    mn = min(len(l) for l in layer_buckets)
    mx = max(len(l) for l in layer_buckets)
    group_size = mx if mx < mn * 1.5 else mn
    out = []
    for layers in layer_buckets:
        n = cdiv(len(layers), group_size)
        for i in range(n):
            names = layers[i::n]
            out.append((names, [specs[x] for x in names]))
    return out


def _group_kv(specs: dict[str, Spec], layout: str) -> tuple[str, list[tuple[list[str], list[Spec]]], dict[str, Spec]]:
    values = list(specs.values())
    if not specs:
        return "attention_free", [], specs
    if all(v == values[0] and v.kind == values[0].kind for v in values):
        return "uniform", [(list(specs), values)], specs
    if is_uniform_type(values):
        return "uniform_type", [(list(specs), values)], specs
    if B.layout_is_block_outermost(layout) and len({v.page_size_bytes for v in values}) > 1:
        return "packed", _packed_groups(specs), specs
    unified = _unify(specs)  # may raise (no full-allocation fallback with mamba layers)
    return "unified", _uniform_page_groups(unified), unified


def _bytes_per_block(groups, layout: str) -> int:
    if not B.layout_is_block_outermost(layout):
        return max(sum(round_up(s.page_size_bytes, s.get_block_stride_alignment()) for s in gs)
                   for _, gs in groups)
    bpb = max(sum(s.page_size_bytes for s in gs) for _, gs in groups)
    uniq = {id(s): s for _, gs in groups for s in gs}.values()
    return round_up(bpb, math.lcm(*(s.get_block_stride_alignment() for s in uniq)))


def _validate_layout(groups, layout: str) -> None:
    pages = {s.page_size_bytes for _, gs in groups for s in gs}
    if len(pages) == 1:
        return
    if not B.layout_is_block_compact(layout) or (len(groups) > 1 and B.layout_is_layer_compact(layout)):
        raise SimulatedError("ValueError", f"KV cache layout {layout} cannot express mixed page sizes")


# --------------------------------------------------------------------------
# overlay


def _apply_overlay(model: _Model, cache: _Cache, specs: dict[str, Spec], notes: list[str]) -> dict[str, Spec]:
    """Our patch series: drafter attention page == the target's MLA latent
    page (targets without MLA latent layers keep stock behaviour)."""
    p = next((specs[l.name].page_size_bytes for l in model.layers
              if l.owner == "target" and l.role == "mla_latent"), None)
    if p is None or model.drafter_backend is None:
        return specs
    out = dict(specs)
    for layer in model.layers:
        if layer.owner != "drafter":
            continue
        s = specs[layer.name]
        per_token = s.with_block_size(1).real_page_size_bytes
        if p % per_token == 0 and model.drafter_backend.supports_block_size(p // per_token):
            out[layer.name] = s.with_block_size(p // per_token)
        else:
            notes.append(f"overlay: no exact drafter block for {layer.name} "
                         f"(P={p}, {per_token} B/token); stock behaviour kept")
    return out


def _target_attention_page(model: _Model, specs: dict[str, Spec]) -> int | None:
    for layer in model.layers:
        if layer.owner == "target" and layer.role in ("mla_latent", "attention"):
            return specs[layer.name].real_page_size_bytes
    return None


# --------------------------------------------------------------------------


def _plan(inputs: GeometryInputs, with_drafter: bool, num_spec: int, notes: list[str],
          model: _Model | None = None) -> tuple[_Model, Plan]:
    cache = None
    rows: tuple[LayerRow, ...] = ()
    try:
        if model is None:
            model = _Model(inputs, with_drafter, num_spec)
        cache = _update_block_size(model, inputs)
        slots = model.slots
        built = {k: slots[k][1](cache) for k in model.used_slots()}  # one build per slot
        specs = {l.name: built[l.slot] for l in model.layers}
        if inputs.vllm_behaviour == "overlay" and with_drafter:
            specs = _apply_overlay(model, cache, specs, notes)
        layout = _resolve_layout(model, specs)
        path, groups, final_specs = _group_kv(specs, layout)
        rows = _Thunk(lambda: _rows(model, final_specs))
        _validate_layout(groups, layout)
        bpb = _bytes_per_block(groups, layout)
        num_blocks = inputs.kv_cache_memory_bytes // bpb
        t_block = next(final_specs[l.name].block_size for l in model.layers
                       if l.owner == "target" and l.role in ("mla_latent", "attention"))
        grows = _Thunk(lambda: _group_rows(model, path, groups))
        prefix = resolve_prefix_cache(
            [CacheGroup(gs[0].kind, gs[0].block_size, gs[0].tokens_per_state)
             for _, gs in groups],
            inputs.enable_prefix_caching, inputs.mamba_cache_mode, model.max_model_len)
        return model, Plan(cache.block_size, cache.mamba_page_size_padded, layout, path, rows,
                           grows, bpb, num_blocks, num_blocks * t_block,
                           _target_attention_page(model, final_specs), prefix_cache=prefix)
    except PrefixCacheError as exc:
        return model, Plan(cache.block_size, cache.mamba_page_size_padded, None, None, rows,
                           (), None, None, None, None, error=str(exc))
    except SimulatedError as exc:
        return model, Plan(cache.block_size if cache else None,
                           cache.mamba_page_size_padded if cache else None,
                           None, None, rows, (), None, None, None, None, error=str(exc))


def _group_rows(model: _Model, path: str, groups) -> tuple[GroupRow, ...]:
    roles = {l.name: l.role for l in model.layers}
    return tuple(
        GroupRow(i, gs[0].vllm_class,
                 tuple(sorted({roles[n] for n in names})), tuple(names),
                 gs[0].block_size, sum(s.page_size_bytes for s in gs),
                 _group_is_draft(path, gs))
        for i, (names, gs) in enumerate(groups))


def _group_is_draft(path: str, specs: list[Spec]) -> bool:
    """The draft tag the group's spec carries.  Packed groups wrap per-layer
    specs (UniformTypeKVCacheSpecs); the other paths merge the layers into one
    spec, and FullAttentionSpec.merge / MLAAttentionSpec.merge build a fresh
    spec that drops ``is_draft`` (KVCacheSpec.merge deep-copies and keeps it)."""
    if path in ("packed", "uniform_type"):
        return any(s.is_draft for s in specs)
    if specs[0].kind in ("full", "mla"):
        return False
    return specs[0].is_draft


def _role(model: _Model, name: str) -> str:
    roles = model.__dict__.get("_roles")
    if roles is None:
        roles = model._roles = {l.name: l.role for l in model.layers}
    return roles.get(name, "?")


_ROW_FIELDS = ("spec_class", "block_size", "num_kv_heads", "head_size", "dtype",
               "bytes_per_token", "real_page_bytes", "page_bytes", "padded",
               "block_stride_alignment")


_new_object = object.__new__
_set_attr = object.__setattr__


def _row_from_template(name: str, owner: str, role: str, template: dict) -> LayerRow:
    row = _new_object(LayerRow)
    d = template.copy()
    d["name"] = name
    d["owner"] = owner
    d["role"] = role
    _set_attr(row, "__dict__", d)
    return row


_ROWS: dict[tuple, dict] = {}  # row values -> {layer: LayerRow}


def _rows(model: _Model, specs: dict[str, Spec]) -> tuple[LayerRow, ...]:
    """One LayerRow per layer.  A row is a pure function of the layer (name,
    owner, role) and its spec's row values, and rows are immutable, so they
    are shared across plans and calls (layers are keyed by object, which
    keeps them alive)."""
    out = []
    by_spec: dict[int, tuple] = {}
    for l in model.layers:
        s = specs[l.name]
        hit = by_spec.get(id(s))
        if hit is None:
            vals = (s.vllm_class, s.block_size, s.num_kv_heads, s.head_size,
                    s.dtype or "/".join(s.mamba_dtypes),
                    s.bytes_per_token if s.is_attention else 0,
                    s.real_page_size_bytes, s.page_size_bytes,
                    s.page_size_bytes != s.real_page_size_bytes,
                    s.get_block_stride_alignment())
            cache = _ROWS.get(vals)
            if cache is None:
                if len(_ROWS) > 20000:
                    _ROWS.clear()
                cache = _ROWS[vals] = {}
            hit = by_spec[id(s)] = (cache, dict(zip(_ROW_FIELDS, vals)))
        row = hit[0].get(l)
        if row is None:
            row = hit[0][l] = _row_from_template(l.name, l.owner, l.role, hit[1])
        out.append(row)
    return tuple(out)


def simulate(inputs: GeometryInputs) -> GeometryReport:
    """Reproduce vLLM 0.33.0's KV-cache geometry for ``inputs``."""
    notes: list[str] = []
    model, with_d = _plan(inputs, inputs.has_drafter, inputs.num_speculative_tokens, notes)
    if model is None:  # the model itself cannot be built (vLLM raises at load)
        model_kind(inputs.target_config)
        return GeometryReport(
            behaviour=inputs.vllm_behaviour, model_kind=model_kind(inputs.target_config),
            capability_family=inputs.capability_family,
            tensor_parallel_size=inputs.tensor_parallel_size,
            num_speculative_tokens=inputs.num_speculative_tokens,
            target_kv_dtype=inputs.kv_cache_dtype, drafter_kv_dtype=inputs.drafter_kv_cache_dtype,
            backends=(), kernel_block_alignment=None, drafter_backend=None,
            drafter_kernel_block=None, with_drafter=with_d, without_drafter=with_d,
            target_only_same_spec=with_d, kv_cache_memory_bytes=inputs.kv_cache_memory_bytes,
            notes=tuple(notes))
    if inputs.has_drafter:
        n = inputs.num_speculative_tokens
        target = model.target_only()
        if n == 0:
            _, without = _plan(inputs, False, 0, notes, target)
            same_spec = without
        else:
            _, without = _plan(inputs, False, 0, notes)
            _, same_spec = _plan(inputs, False, n, notes, target)
    else:
        without = same_spec = with_d
    backends = model.non_ssm_backends()
    db = model.drafter_backend
    return GeometryReport(
        behaviour=inputs.vllm_behaviour,
        model_kind=model.kind,
        capability_family=inputs.capability_family,
        tensor_parallel_size=inputs.tensor_parallel_size,
        num_speculative_tokens=inputs.num_speculative_tokens,
        target_kv_dtype=model.kv_target,
        drafter_kv_dtype=model.kv_drafter,
        backends=tuple(b.name for b in backends),
        kernel_block_alignment=backends[0].min_kernel_block if backends else None,
        drafter_backend=db.name if db else None,
        drafter_kernel_block=db.min_kernel_block if db else None,
        with_drafter=with_d,
        without_drafter=without,
        target_only_same_spec=same_spec,
        kv_cache_memory_bytes=inputs.kv_cache_memory_bytes,
        notes=tuple(notes),
    )
