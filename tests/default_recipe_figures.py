"""The default recipe's KV geometry, stock vLLM 0.34.0 and with the overlay, as literal figures.

Every figure is worked out by hand below, in the comments next to it, from the
recipe's config snapshots (recipes/glm53-flash-dflash2-gb300/configs: the target's
``kv_lora_rank`` 512, ``qk_rope_head_dim`` 0, ``linear_num_heads`` 64,
``linear_head_dim`` 128, ``linear_conv_kernel_dim`` 4, ``index_head_dim`` 128,
``index_kpool`` 4, 34 ``linear_attention`` + 11 ``indexed_attention`` layers,
``max_position_embeddings`` 1,048,576; the drafter's 5 layers of 8 KV heads x
``head_dim`` 128, ``sliding_window`` 2,048), the recipe's serving settings (GB300:
capability family 100, TP1, fp8 KV, drafter KV auto = bf16, num_speculative_tokens 7,
150 GiB of KV memory, prefix caching on) and vLLM 0.34.0's formulas, named at each
figure. Nothing here is copied from the simulator's or vLLM's output.

Who holds what to these figures:

* tests/unit/geometry/plan/test_simulate.py re-derives every figure from the config fields in code
  and compares each dataclass whole, then holds the simulator's report for the recipe's
  gate input to each figure (absolute values);
* tests/agreement/test_overlay_planning_agreement.py holds them to vLLM's own code on the pristine
  (``STOCK``) and the patched (``OVERLAY``, ``PREFIX_OFF`` / ``PREFIX_ON``) tree: its
  planner, its engine core's block sizes, and its scheduler admitting requests of
  1,048,576 tokens until it refuses one;
* the documents' tables are generated from the simulator (tools/doc_sections.py).
"""

from __future__ import annotations

from dataclasses import dataclass

MEMORY_GIB = 150  # geometry.kv_cache_memory_gib: 150 x 2^30 = 161,061,273,600 B
DRAFTER_BYTES_PER_TOKEN = 4_096  # 2 (K, V) x 8 KV heads x 128 x 2 B (bf16)


@dataclass(frozen=True)
class Column:
    """One column of the comparison: stock vLLM 0.34.0 or with the overlay."""

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


# Both columns (vLLM 0.34.0, Platform._align_hybrid_block_size and the planner):
# * KDA state (MambaStateShapeCalculator.kda_state_shape / kda_state_dtype): conv state
#   3 x 64 heads x 128 = 24,576 channels x (kernel 4 - 1 + 7 speculative) = 10 positions x 2 B (bf16)
#   = 491,520 B, recurrent state 64 x 128 x 128 x 4 B (fp32) = 4,194,304 B: 4,685,824 B.
# * MLA latent in fp8: kv_lora_rank 512 + qk_rope_head_dim 0 = 512 B per token.
# * Hybrid block: the indexer's kernel block 32 x index_kpool 4 = 128 (at least 128 for MLA);
#   the smallest multiple of 128 whose MLA page holds the KDA state: 128 x ceil(4,685,824 /
#   (128 x 512 = 65,536)) = 128 x 72 = 9,216 tokens; MLA page 9,216 x 512 = 4,718,592 B; the KDA
#   page is padded to it (4,685,824 -> 4,718,592).
# * Bytes per block (kv_cache_planning._get_kv_cache_bytes_per_block, block-outermost layout): the
#   widest group, rounded up to the stride lcm(32 rows x 512 B = 16,384, 64 indexer states x
#   (128 + 4) B = 8,448) = 540,672 B. The 11 MLA layers' group: 11 x (4,718,592 + 9,216 / 4 x 132 =
#   304,128) = 55,249,920 B -> 103 x 540,672 = 55,689,216 B (the 34 KDA layers go into 4 groups of
#   at most 9 pages, KDA_GROUPS: 9 x 4,718,592 = 42,467,328 B, narrower). Without the drafter that is
#   every block.
# * Blocks: 161,061,273,600 // bytes per block; token slots: blocks x 9,216.
STOCK = Column(
    target_block=9_216,
    mla_page=4_718_592,
    kda_real_page=4_685_824,
    kda_padded_page=4_718_592,
    # stock 0.34.0 gives the drafter the target's block: 9,216 x 4,096 B = 37,748,736 B per page,
    # 5 drafter layers = 188,743,680 B, the widest group: 350 x 540,672 = 189,235,200 B per block.
    drafter_block=9_216,
    drafter_page=37_748_736,
    bytes_per_block_with=189_235_200,
    bytes_per_block_without=55_689_216,
    blocks=851,  # 161,061,273,600 // 189,235,200 = 851.1
    kv_token_slots=7_842_816,  # 851 x 9,216
    passed=False,  # the drafter's group makes every block 3.4 x as wide as the target alone needs
)
OVERLAY = Column(
    target_block=9_216,
    mla_page=4_718_592,
    kda_real_page=4_685_824,
    kda_padded_page=4_718_592,
    # the overlay fits the drafter's page to the MLA page: 4,718,592 / 4,096 = 1,152 tokens (a multiple
    # of FLASH_ATTN's 16-token kernel block); its 5 pages (23,592,960 B) are narrower than the MLA group.
    drafter_block=1_152,
    drafter_page=4_718_592,
    bytes_per_block_with=55_689_216,
    bytes_per_block_without=55_689_216,
    blocks=2_892,  # 161,061,273,600 // 55,689,216 = 2,892.1
    kv_token_slots=26_652_672,  # 2,892 x 9,216
    passed=True,
)


MAX_MODEL_LEN = 1 << 20  # serving.max_model_len = the target's max_position_embeddings
NUM_SPEC = 7  # serving.num_speculative_tokens
# The packed planner gives the 34 KDA layers groups of at most 55,249,920 // 4,718,592 = 11 pages (the MLA
# group's bytes): ceil(34 / 11) = 4 groups (9 + 9 + 8 + 8 layers).
KDA_GROUPS = 4
BATCHED_TOKENS = 16_384  # what `vllm serve` batches on a GB300 (EngineArgs.get_batch_defaults: >= 160 GiB)
BATCHES_IN_FLIGHT = 2  # async scheduling (on by default on a GPU): VllmConfig.max_concurrent_batches
LOOKAHEAD = NUM_SPEC + 1  # VllmConfig.num_lookahead_tokens for DFlash: a bonus query + one per draft token
POOL = OVERLAY.blocks - 1  # the BlockPool keeps one null block: 2,891 blocks to grant


@dataclass(frozen=True)
class PrefixCaching:
    """The overlay's plan with prefix caching off (mamba_cache_mode none) or on (align), and what a
    request of max_model_len tokens (a prompt of 1,048,575 tokens and the token it generates) holds
    when vLLM's scheduler admits and prefills it at the recipe's 16,384 batched tokens."""

    scheduler_block: int
    hash_block: int | None  # None: off, no hashing
    hits_every_overlay: int | None  # None: no hits
    hits_every_stock: int | None
    # MambaSpec.max_memory_usage_bytes / page, per KDA group: states kept + num_speculative_tokens
    # (+ FlashKDA's prefill checkpoint with "align")
    kda_state_blocks_sized: int
    # the groups' specs summed for one request of max_model_len: what vLLM logs its concurrency by
    blocks_one_1m_request_sized: int
    vllm_max_concurrency_1m: float  # get_max_concurrency_for_kv_cache_config: blocks / the above, 2 places
    prefill_chunks_1m: int  # the scheduler steps one prefill takes
    kda_state_blocks_held: int  # per KDA group, after the prefill
    drafter_window_blocks_held: int
    blocks_one_1m_request_holds: int  # all groups, after the prefill
    admission_blocks_1m: int  # what the scheduler's full-sequence admission check asks of the free pool
    requests_of_1m_at_once: int  # admitted one after another before the next is refused


# Prefix caching off: mamba_cache_mode "none", the KDA block is max_model_len (MambaSpec in "none").
PREFIX_OFF = PrefixCaching(
    # lcm of the groups' blocks (resolve_kv_cache_block_sizes): lcm(1,048,576, 9,216, 16, 1,152) =
    # 2^20 x 9 = 9,437,184; no hashing, no hits.
    scheduler_block=9_437_184,
    hash_block=None,
    hits_every_overlay=None,
    hits_every_stock=None,
    kda_state_blocks_sized=1 + 7,  # 1 + num_speculative_blocks
    # 114 MLA (ceil(1,048,576 / 9,216) = 113.8) + 4 x 8 KDA + 1 kpool-tail ring + drafter window
    # ceil(min(2,048 - 1 + 2 x 16,384, 1,048,576) / 1,152) + 1 = ceil(34,815 / 1,152) + 1 = 31 + 1 = 32
    blocks_one_1m_request_sized=114 + 4 * 8 + 1 + 32,  # 179
    vllm_max_concurrency_1m=16.16,  # 2,892 / 179 = 16.156
    # No mamba split in "none": 1,048,575 = 63 x 16,384 + 16,383: 64 chunks.
    prefill_chunks_1m=64,
    # The last chunk [1,032,192, 1,048,575) is allocated with the one before it (16,384 tokens) still in
    # flight: processed tokens 1,032,192 - 16,384 = 1,015,808; slots up to min(1,048,575 + 8, 2^20) = 2^20.
    # KDA: ceil((2^20 + 7 x 2^20) / 2^20) = 8 blocks, none before the processed tokens' block.
    kda_state_blocks_held=8,
    # Window: ceil(2^20 / 1,152) = 911 blocks, less those wholly before 1,015,808 - 2,047 = 1,013,761:
    # 1,013,761 // 1,152 = 880: 31.
    drafter_window_blocks_held=31,
    blocks_one_1m_request_holds=114 + 4 * 8 + 1 + 31,  # 178
    # Admission (the whole prompt, the window capped at its spec's 32): ceil(1,048,575 / 9,216) = 114 +
    # 4 x ceil((1,048,575 + 7 x 2^20) / 2^20) = 4 x 8 + 1 + min(ceil(1,048,575 / 1,152) = 911, 32) = 179
    admission_blocks_1m=114 + 4 * 8 + 1 + 32,
    # 1 + (2,891 - 179) // 178 = 1 + 15 (2,712 / 178 = 15.2): the 17th is refused with 2,891 - 16 x 178 =
    # 43 blocks free
    requests_of_1m_at_once=16,
)
# Prefix caching on: mamba_cache_mode "align", the KDA block 9,216.
PREFIX_ON = PrefixCaching(
    # lcm(9,216, 16, 1,152) = 9,216; hash block: gcd of the prefix-cacheable groups' blocks (the ring
    # is not) = gcd(9,216, 1,152) = 1,152, on which hits land (partial_hash_hits_enabled: the KDA block
    # 9,216 > 1,152); stock's drafter takes 9,216, so its hits land on 9,216.
    scheduler_block=9_216,
    hash_block=1_152,
    hits_every_overlay=1_152,
    hits_every_stock=9_216,
    # GB300 (SM103), a bf16 model, KDA head_dim 128, a bounded gate (linear_lower_bound -5.0): vLLM 0.34.0
    # runs the KDA prefill on FlashKDA, whose spec holds one prefill-checkpoint block per request in
    # "align" (Glm5NextLinearAttention.get_kv_cache_spec, checkpoint alignment 16 tokens): 2 + 7 + 1.
    kda_state_blocks_sized=2 + 7 + 1,
    blocks_one_1m_request_sized=114 + 4 * 10 + 1 + 32,  # 187
    vllm_max_concurrency_1m=15.47,  # 2,892 / 187 = 15.465
    # The mamba split (Scheduler._mamba_block_aligned_split) ends every chunk but the last on the cache
    # block 9,216: 16,384 -> 9,216. At 112 x 9,216 = 1,032,192 the rest, 16,383 tokens, fits one step and
    # FlashKDA can export the checkpoint inside it (is_mamba_prefill_checkpoint_valid: the start is on the
    # 1,152 hash grid, the checkpoint 1,048,320 = 910 x 1,152 lies inside, 16,128 tokens from the start, a
    # multiple of 16, in block 112 > the start's block 111): one chunk. 112 + 1 = 113 chunks.
    prefill_chunks_1m=113,
    # The last chunk is allocated with the one before it (9,216) in flight: processed 1,032,192 - 9,216 =
    # 1,022,976. KDA: the states of the chunk ends in blocks 110 (1,022,976), 111 (1,032,192) and 113
    # (1,048,575) from the processed tokens' block (1,022,975 // 9,216 = 110) on: 3, + 7 speculative
    # + 1 checkpoint block (block 112) = 11 (vLLM's spec counts 2 states: one fewer).
    kda_state_blocks_held=3 + 7 + 1,
    # Window: 911 blocks less those wholly before 1,022,976 - 2,047 = 1,020,929: 1,020,929 // 1,152 = 886:
    # 25 (the chunks keep 9,216 in flight, not the 32,768 the spec reserves for).
    drafter_window_blocks_held=25,
    blocks_one_1m_request_holds=114 + 4 * 11 + 1 + 25,  # 184
    # Admission: 114 + 4 x min(114 + 7, 1 + 1 checkpoint + 7 = 9) + 1 + min(911, 32) = 183
    admission_blocks_1m=114 + 4 * 9 + 1 + 32,
    # 1 + (2,891 - 184) // 184 = 1 + 14 (2,707 / 184 = 14.7): the 16th is refused with 2,891 - 15 x 184 =
    # 131 blocks free
    requests_of_1m_at_once=15,
)


# Requests at once (geometry/plan/together.py's DEFINITION) with the drafter, at the default lengths, each a
# prompt and an output of min(4,096, N / 4) tokens (together.workload): N requests sent together all run
# without a preemption, N + 1 do not. Not derived by hand: vLLM 0.34.0's own scheduler ran them
# (tests/support/oracle_together.py, on the pristine tree for stock and the patched one for the overlay;
# tests/agreement/test_together_figures.py runs the same): at each figure N all ran, and N + 1 was
# preempted (the step given) or left one waiting.
TOGETHER_LENGTHS = ((1_044_480, 4_096), (126_976, 4_096), (28_672, 4_096))  # 1M, 128K, 32K
TOGETHER_STOCK = (5, 20, 27)  # 6 preempted at step 679, 21 at step 2,076, 28 at step 1,096
TOGETHER_OVERLAY = (19, 56, 72)  # 20: one left waiting; 57 preempted at step 2,647; 73 at step 1,192
