"""The default recipe's KV geometry, stock vLLM 0.33.0 and with the overlay, as literal figures.

Worked out by hand from the recipe's config snapshots and vLLM 0.33.0's formulas in
tests/geometry/test_geometry.py (which also holds the simulator to them),
held to vLLM's own planner in tests/overlay/test_overlay_planning.py; the
documents' tables are generated from the simulator (tests/doc_sections.py).
"""

from __future__ import annotations

from dataclasses import dataclass

MEMORY_GIB = 150
DRAFTER_BYTES_PER_TOKEN = 4_096  # 2 (K, V) x 8 KV heads x 128 x 2 B (bf16)


@dataclass(frozen=True)
class Column:
    """One column of the comparison: stock vLLM 0.33.0 or with the overlay."""

    target_block: int
    mla_page: int
    kda_real_page: int
    kda_padded_page: int
    drafter_block: int
    drafter_page: int
    bytes_per_block_with: int
    bytes_per_block_without: int
    blocks: int
    kv_token_slots: int
    passed: bool


STOCK = Column(
    target_block=9_216,
    mla_page=4_718_592,
    kda_real_page=4_685_824,
    kda_padded_page=4_718_592,
    drafter_block=9_216,
    drafter_page=37_748_736,
    bytes_per_block_with=189_235_200,
    bytes_per_block_without=55_689_216,
    blocks=851,
    kv_token_slots=7_842_816,
    passed=False,
)
OVERLAY = Column(
    target_block=9_216,
    mla_page=4_718_592,
    kda_real_page=4_685_824,
    kda_padded_page=4_718_592,
    drafter_block=1_152,
    drafter_page=4_718_592,
    bytes_per_block_with=55_689_216,
    bytes_per_block_without=55_689_216,
    blocks=2_892,
    kv_token_slots=26_652_672,
    passed=True,
)


@dataclass(frozen=True)
class PrefixCaching:
    """The overlay's plan with prefix caching off (mamba_cache_mode none) or on (align)."""

    scheduler_block: int
    hash_block: int | None  # None: off, no hashing
    hits_every_overlay: int | None  # None: no hits
    hits_every_stock: int | None
    # per KDA group: states kept + num_speculative_tokens (+ FlashKDA's prefill checkpoint with "align")
    kda_state_blocks_per_request: int
    blocks_one_1m_request_draws: int


MAX_MODEL_LEN = 1 << 20
NUM_SPEC = 7
KDA_GROUPS = 4  # 34 KDA layers in groups of at most 9
PREFIX_OFF = PrefixCaching(
    scheduler_block=9_437_184,
    hash_block=None,
    hits_every_overlay=None,
    hits_every_stock=None,
    kda_state_blocks_per_request=1 + 7,
    blocks_one_1m_request_draws=154,
)
PREFIX_ON = PrefixCaching(
    scheduler_block=9_216,
    hash_block=1_152,
    hits_every_overlay=1_152,
    hits_every_stock=9_216,
    # GB300 (SM103), a bf16 model, KDA head_dim 128, a bounded gate: vLLM 0.33.0 runs FlashKDA, whose
    # spec holds one prefill-checkpoint block per request in "align" (Glm5NextLinearAttention.get_kv_cache_spec).
    kda_state_blocks_per_request=2 + 7 + 1,
    blocks_one_1m_request_draws=162,
)
