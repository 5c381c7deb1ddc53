"""What the simulator reports: per-layer and per-group rows, one planning
run (``Plan``) and the ``GeometryReport`` the gate reads (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass

from geometry.image_contract import Behaviour, Role
from geometry.kv.kv_spec import KVCacheSpec, RequestBlocks, spec_kind
from geometry.plan.prefix_cache import PrefixCache

__all__ = ["LayerRow", "GroupRow", "RequestBlocks", "Plan", "GeometryReport"]


@dataclass(frozen=True)
class LayerRow:
    name: str
    owner: Role
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

    @property
    def kind(self) -> type[KVCacheSpec]:
        """The spec kind of the row's class."""
        return spec_kind(self.spec_class)


@dataclass(frozen=True)
class GroupRow:
    index: int
    spec_class: str
    roles: tuple[str, ...]
    layer_names: tuple[str, ...]
    block_size: int
    bytes: int  # sum of the group's layer pages (one block of this group)
    is_draft: bool
    per_request: RequestBlocks | None = None  # None: not known (the oracle's rows)

    @property
    def kind(self) -> type[KVCacheSpec]:
        """The spec kind of the group's class."""
        return spec_kind(self.spec_class)


@dataclass(frozen=True)
class Plan:
    """One planning run (with or without the drafter)."""

    block_size: int | None  # cache_config.block_size after alignment
    mamba_page_size_padded: int | None
    layout: str | None
    grouping_path: str | None  # uniform | uniform_type | packed | unified
    layers: tuple[LayerRow, ...]
    groups: tuple[GroupRow, ...]
    bytes_per_block: int | None
    num_blocks: int | None
    tokens_fit: int | None  # num_blocks * target attention block size
    target_attention_page: int | None  # MLA latent (or full attn) real page at the platform's block, before unify
    error: str | None = None
    prefix_cache: PrefixCache | None = None  # None when vLLM cannot plan


@dataclass(frozen=True)
class GeometryReport:
    behaviour: Behaviour
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
    kv_cache_memory_bytes: int  # per rank
    notes: tuple[str, ...] = ()
    nodes: int = 1  # machines the TP group spans
    requested_block_size: int | None = None  # serving.block_size as given (None: vLLM picks)

    @property
    def ranks_per_node(self) -> int:
        return self.tensor_parallel_size // self.nodes

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
