"""The KV-cache spec kinds: one frozen dataclass per kind of vLLM's
``v1/kv_cache_interface.py``, each owning what vLLM's class decides for its
kind: the page size, the blocks a request holds, how it groups and merges,
how it takes a larger page, and its part in prefix caching (stdlib only).

A spec's fields are the ones of vLLM's dataclass that decide page sizes,
grouping and equality; what the grouping, prefix-cache, capacity and verdict
code needs to know of a kind it asks the spec (or, for a report row, the spec
class the row names: :func:`spec_kind`), never a kind string.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from geometry.kv import backends as B
from geometry.kv.units import cdiv


class SimulatedError(Exception):
    """What vLLM would raise (type name kept in ``vllm_type``)."""

    def __init__(self, vllm_type: str, message: str):
        super().__init__(f"{vllm_type}: {message}")
        self.vllm_type = vllm_type
        self.message = message


@dataclass(frozen=True)
class StateBlocks:
    """What a mamba group's ``MambaSpec`` says of the blocks a request holds: the cache mode,
    ``num_speculative_blocks``, ``num_prefill_checkpoint_blocks`` and ``prefill_checkpoint_alignment``."""

    align: bool  # mamba_cache_mode "align" (else "none")
    speculative: int
    checkpoint_blocks: int = 0
    checkpoint_alignment: int | None = None

    @property
    def max_blocks(self) -> int:
        """``MambaSpec.max_memory_usage_bytes`` / page: in "align" 2 (the state is copied from the
        previous block into the next) + speculative + prefill-checkpoint blocks, else 1 + speculative."""
        if self.align:
            return 2 + self.speculative + self.checkpoint_blocks
        return 1 + self.speculative


@dataclass(frozen=True)
class RequestBlocks:
    """How many blocks one request draws from the pool for a group, as the
    group's spec counts them (``max_memory_usage_bytes`` / page), and what the
    group's manager allocates by (admission.py):

    * ``per_token``: ``ceil(tokens / block_size)`` (full attention, MLA);
    * ``window``: ``ceil(min(window - 1 + tokens in flight, tokens) /
      block_size) + 1`` (sliding window: the window, the tokens scheduled but
      not yet freed, and one block for a window that starts mid-block);
    * ``fixed``: ``fixed`` blocks whatever the length (the kpool tail ring: 1);
    * ``state``: a mamba state, ``fixed`` = ``state.max_blocks``.
    """

    rule: str  # per_token | window | fixed | state
    block_size: int
    fixed: int = 0
    window: int | None = None
    state: StateBlocks | None = None

    def blocks(self, tokens: int, in_flight: int) -> int:
        """Blocks one request of ``tokens`` tokens draws, ``in_flight`` tokens scheduled but not freed."""
        if self.rule == "per_token":
            return cdiv(tokens, self.block_size)
        if self.rule == "window":
            return cdiv(min(self.window - 1 + in_flight, tokens), self.block_size) + 1
        return self.fixed


@dataclass(frozen=True, kw_only=True)
class KVCacheSpec:
    """What every kind has: its block, an optional padded page, the byte stride
    a block is rounded to, whether DCP shards it, and the draft tag."""

    block_size: int
    page_size_padded: int | None = None
    block_stride_alignment: Any = None  # None | int | B.Multiple
    dcp_sharded: bool = True
    is_draft: bool = field(default=False, compare=False)

    # vLLM's class name, which reports and records carry.
    vllm_class: ClassVar[str]
    # Keeps every token's KV (FullAttentionManager): capacity and requests count its blocks per token.
    keeps_every_token: ClassVar[bool] = False
    # Holds a recurrent state per request (MambaSpec), not tokens.
    holds_state: ClassVar[bool] = False
    # KVCacheSpec.prefix_cacheable.
    prefix_cacheable: ClassVar[bool] = True
    # SingleTypeKVCacheManager.supports_fine_grained_hash_lookup of the kind's manager.
    fine_grained_lookup: ClassVar[bool] = True
    # FullAttentionSpec.merge / MLAAttentionSpec.merge build a fresh spec, dropping is_draft;
    # KVCacheSpec.merge deep-copies and keeps it.
    merge_keeps_draft: ClassVar[bool] = True

    # -- pages
    @property
    def real_page_size_bytes(self) -> int:
        raise NotImplementedError

    @property
    def page_size_bytes(self) -> int:
        real = self.real_page_size_bytes
        if self.page_size_padded is not None:
            if self.page_size_padded < real:
                raise SimulatedError("AssertionError", "page_size_padded < page size")
            return self.page_size_padded
        return real

    @property
    def tokens_per_state(self) -> int:
        return 1

    @property
    def bytes_per_token(self) -> int:
        """Unpadded bytes per token (0 for a state)."""
        return 0

    @property
    def dtype_name(self) -> str:
        raise NotImplementedError

    @property
    def hnc_shape(self) -> tuple[int, int, int]:
        """(heads, states, page) as ``resolve_kv_cache_layout`` compares specs' shapes."""
        return (1, 1, self.page_size_bytes)

    @property
    def row_heads(self) -> tuple[int, int]:
        """(KV heads, head size) a report row shows (0, 0 for a state)."""
        return (0, 0)

    @property
    def in_dcp_layout_check(self) -> bool:
        """Whether the layout's DCP rule counts this spec's ``dcp_sharded``."""
        return False

    def with_block_size(self, block_size: int) -> KVCacheSpec:
        return replace(self, block_size=block_size)

    def get_block_stride_alignment(self) -> int:
        """The byte stride one block is rounded up to (``MultipleOf(k)``: the
        page of ``gcd(k, block)`` tokens, 1 when that is the whole block)."""
        a = self.block_stride_alignment
        if not isinstance(a, B.Multiple):
            return a or 1
        k = math.gcd(a.base, self.block_size)
        if k == self.block_size:
            return 1
        return self.with_block_size(k).page_size_bytes

    # -- grouping
    def uniform_with(self, specs: list[KVCacheSpec]) -> bool:
        """``uniform_with_collection``: whether ``specs`` can share one
        ``UniformTypeKVCacheSpecs`` with this one as its first."""
        return all(type(s) is type(self) for s in specs)

    def mergeable(self, other: KVCacheSpec) -> bool:
        """Whether ``KVCacheSpec.merge`` takes the two into one group spec."""
        return self == other

    def unified_to(self, page: int, name: str) -> KVCacheSpec:
        """``unify_kv_cache_spec_page_size``: this spec at the widest page ``page``."""
        if page % self.page_size_bytes == 0:
            return self.with_block_size(self.block_size * (page // self.page_size_bytes))
        return replace(self, page_size_padded=page)

    def packs_as_state(self, repeats: int | None) -> bool:
        """Whether ``_get_packed_kv_cache_groups`` spreads this bucket like a
        state (``repeats``: the packed layers per page, None when unbalanced)."""
        return False

    # -- requests
    def per_request(self, state: StateBlocks) -> RequestBlocks:
        """The blocks a request holds (``max_memory_usage_bytes`` / page);
        ``state``: what a mamba group's spec says for the plan."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    """``AttentionSpec``: heads x states per block x bytes per state."""

    num_kv_heads: int
    head_size: int
    head_size_v: int = 0
    dtype_bytes: int
    dtype: str
    # bytes per (head, state) when the cache dtype packs its content
    # (fp8_ds_mla: 656); None = (head + head_v) x dtype
    content_bytes: int | None = None
    state_tokens: int = 1  # tokens one stored state covers

    @property
    def tokens_per_state(self) -> int:
        return self.state_tokens

    @property
    def num_states(self) -> int:
        if self.state_tokens > 0:
            return self.block_size // self.state_tokens
        return 1

    @property
    def state_content_size_bytes(self) -> int:
        if self.content_bytes is not None:
            return self.content_bytes
        return (self.head_size + self.head_size_v) * self.dtype_bytes

    @property
    def real_page_size_bytes(self) -> int:
        return self.num_kv_heads * self.num_states * self.state_content_size_bytes

    @property
    def bytes_per_token(self) -> int:
        return self.num_kv_heads * self.state_content_size_bytes // max(self.state_tokens, 1)

    @property
    def dtype_name(self) -> str:
        return self.dtype

    @property
    def hnc_shape(self) -> tuple[int, int, int]:
        return (self.num_kv_heads, self.num_states, self.page_size_bytes)

    @property
    def row_heads(self) -> tuple[int, int]:
        return (self.num_kv_heads, self.head_size)

    @property
    def in_dcp_layout_check(self) -> bool:
        return True

    def per_request(self, state: StateBlocks) -> RequestBlocks:
        return RequestBlocks("per_token", self.block_size)


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    """``FullAttentionSpec``: every token kept (``FullAttentionManager``)."""

    sliding_window: int | None = None

    vllm_class: ClassVar[str] = "FullAttentionSpec"
    keeps_every_token: ClassVar[bool] = True
    merge_keeps_draft: ClassVar[bool] = False

    def uniform_with(self, specs: list[KVCacheSpec]) -> bool:
        # KVCacheSpecRegistry: MLAAttentionSpec groups with FullAttentionSpec.
        return all(isinstance(s, FullAttentionSpec) for s in specs)

    def mergeable(self, other: KVCacheSpec) -> bool:
        if type(other) is not type(self):
            return False
        same = replace(self, sliding_window=None) == replace(other, sliding_window=None)
        windows = {w for w in (self.sliding_window, other.sliding_window) if w is not None}
        return same and len(windows) <= 1


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    """``MLAAttentionSpec``: one latent head per token; ``cache_role`` tells a
    sparse MLA latent from the sparse indexer's key cache."""

    cache_role: str = "sparse"  # "sparse" | "indexer"

    vllm_class: ClassVar[str] = "MLAAttentionSpec"

    def unified_to(self, page: int, name: str) -> KVCacheSpec:
        if page % self.page_size_bytes == 0:
            return super().unified_to(page, name)
        raise SimulatedError(
            "NotImplementedError",
            f"Layer {name}: page size is not divisible by the maximum page size "
            "and cannot be padded. Padding is only supported for non-MLA attention layers.",
        )


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    """``SlidingWindowSpec``: the window's tokens kept (``SlidingWindowManager``)."""

    sliding_window: int

    vllm_class: ClassVar[str] = "SlidingWindowSpec"
    fine_grained_lookup: ClassVar[bool] = False

    def uniform_with(self, specs: list[KVCacheSpec]) -> bool:
        return all(isinstance(s, SlidingWindowSpec) and s.sliding_window == self.sliding_window for s in specs)

    def packs_as_state(self, repeats: int | None) -> bool:
        return repeats is None

    def per_request(self, state: StateBlocks) -> RequestBlocks:
        return RequestBlocks("window", self.block_size, window=self.sliding_window)


@dataclass(frozen=True, kw_only=True)
class CircularBufferSpec(AttentionSpec):
    """``CircularBufferSpec``: one ring block for the request's life (``CircularBufferManager``)."""

    vllm_class: ClassVar[str] = "CircularBufferSpec"
    prefix_cacheable: ClassVar[bool] = False
    fine_grained_lookup: ClassVar[bool] = False

    @property
    def in_dcp_layout_check(self) -> bool:
        return False

    def packs_as_state(self, repeats: int | None) -> bool:
        return True

    def per_request(self, state: StateBlocks) -> RequestBlocks:
        return RequestBlocks("fixed", self.block_size, fixed=1)


@dataclass(frozen=True, kw_only=True)
class MambaSpec(KVCacheSpec):
    """``MambaSpec``: a recurrent state (KDA, GDN) per request, padded to the attention page."""

    state_bytes: int
    shapes: tuple = ()
    dtypes: tuple = ()
    dcp_sharded: bool = False

    vllm_class: ClassVar[str] = "MambaSpec"
    holds_state: ClassVar[bool] = True

    @property
    def real_page_size_bytes(self) -> int:
        return self.state_bytes

    @property
    def dtype_name(self) -> str:
        return "/".join(self.dtypes)

    def uniform_with(self, specs: list[KVCacheSpec]) -> bool:
        return all(isinstance(s, MambaSpec) and s.page_size_bytes == self.page_size_bytes for s in specs)

    def unified_to(self, page: int, name: str) -> KVCacheSpec:
        return replace(self, page_size_padded=page)

    def packs_as_state(self, repeats: int | None) -> bool:
        return True

    def per_request(self, state: StateBlocks) -> RequestBlocks:
        return RequestBlocks("state", self.block_size, fixed=state.max_blocks, state=state)


SPEC_KINDS: dict[str, type[KVCacheSpec]] = {
    cls.vllm_class: cls
    for cls in (FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec, CircularBufferSpec, MambaSpec)
}


def spec_kind(vllm_class: str) -> type[KVCacheSpec]:
    """The kind a report row names by vLLM's class (rows of the oracle carry vLLM's names too)."""
    try:
        return SPEC_KINDS[vllm_class]
    except KeyError:
        raise ValueError(f"spec class {vllm_class!r} is not a modelled KV kind") from None


def is_uniform_type(specs: list[KVCacheSpec]) -> bool:
    if len({s.block_size for s in specs}) > 1:
        return False
    if len({s.dcp_sharded for s in specs}) > 1:
        return False
    return specs[0].uniform_with(specs)


@dataclass
class CacheConfig:
    """The block sizes the layers' specs are built at (vLLM's ``CacheConfig``
    after ``Platform.update_block_size_for_backend``)."""

    block_size: int
    mamba_page_size_padded: int | None = None
    mamba_block_size: int | None = None
