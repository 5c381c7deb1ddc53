"""The KV-cache spec model: the fields of vLLM 0.33.0's ``KVCacheSpec``
dataclasses that decide page sizes, grouping and equality, and the block
sizes the specs are built at (stdlib only)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from . import backends as B

DTYPE_BYTES = {
    "float32": 4, "float": 4,
    "bfloat16": 2, "float16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "uint8": 1,
}
SUPPORTED_KV_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")


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




@dataclass(frozen=True)
class Spec:
    kind: str  # "mamba" | "mla" | "full" | "sliding" | "circular"
    block_size: int
    num_kv_heads: int = 0
    head_size: int = 0
    head_size_v: int = 0
    dtype_bytes: int = 0
    dtype: str = ""
    # bytes per (head, state) when the cache dtype packs its content
    # (``state_content_bytes``: fp8_ds_mla 656); None = (head + head_v) x dtype
    content_bytes: int | None = None
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

    @property
    def state_content_size_bytes(self) -> int:
        if self.content_bytes is not None:
            return self.content_bytes
        return (self.head_size + self.head_size_v) * self.dtype_bytes

    @property
    def real_page_size_bytes(self) -> int:
        if self.kind == "mamba":
            return self.state_bytes
        return self.num_kv_heads * self.num_states * self.state_content_size_bytes

    @property
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
        return (self.num_kv_heads * self.state_content_size_bytes
                // max(self.tokens_per_state, 1))

    def with_block_size(self, block_size: int) -> "Spec":
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


def uniform_with_collection(first: Spec, specs: list[Spec]) -> bool:
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
    return uniform_with_collection(specs[0], specs)


@dataclass
class CacheConfig:
    """The block sizes the layers' specs are built at (vLLM's ``CacheConfig``
    after ``Platform.update_block_size_for_backend``)."""

    block_size: int
    mamba_page_size_padded: int | None = None
    mamba_block_size: int | None = None

