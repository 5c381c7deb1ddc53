"""Requests of a length admitted one after another, as the modelled vLLM release's
scheduler admits them and its KV-cache manager allocates their blocks (stdlib only).

A request of ``tokens`` tokens is a prompt of ``tokens - 1`` tokens (vLLM
refuses a prompt that leaves no room for one output token). The scheduler
(vllm/v1/core/sched/scheduler.py) admits it only if the whole prompt fits
(``scheduler_reserve_full_isl``, on by default: ``allocate_slots`` with
``full_sequence_must_fit``, each group's blocks for the prompt, a sliding
window capped at ``max_admission_blocks_per_request``), then prefills it in
chunks of at most ``max_num_batched_tokens`` that, with mamba layers in
"align" mode, end on the cache block (``_mamba_block_aligned_split``); each
chunk's slots run ``num_lookahead_tokens`` past it. Blocks are freed on the
processed-token basis (``remove_skipped_blocks`` with the request's computed
tokens less those still in flight: with async scheduling the previous step's).
What one request holds after each chunk, per group
(vllm/v1/core/single_type_kv_cache_manager.py):

* full attention, MLA (``FullAttentionManager``): ``ceil(slots / block)``;
* the kpool tail ring (``CircularBufferManager``): 1;
* a sliding window (``SlidingWindowManager``): the blocks up to the slots,
  less those wholly before ``processed - (window - 1)``;
* a mamba state in "none" mode (``MambaManager``): ``ceil((slots + block x
  speculative) / block)``, less the blocks wholly before the processed tokens;
* a mamba state in "align" mode: one state block per chunk end (the state
  after ``(i + 1) x block`` tokens sits in block ``i``), of which those
  from the block of the last processed token on are kept (with async
  scheduling up to three: the state the step in flight starts from, the one
  it writes and the new step's; ``MambaSpec.max_memory_usage_bytes`` counts
  two), the
  speculative blocks, and on the chunk that ends the prompt one
  prefill-checkpoint block when the backend can export the checkpoint there
  (``is_mamba_prefill_checkpoint_valid``).

With prefix-cache hits at hash granularity (``mamba_partial_cache_hit``) the
split also stops at the prompt's last hash boundary, and when that boundary
lies inside a mamba block the state there is keyed for reuse and copied
(copy-on-write) by the next chunk's allocation: one more block per mamba group
asked of the free pool for that step (``MambaManager._cache_partial_tail_block``,
``allocate_new_blocks``), not kept by the request.

The pool (less the null block) then grants ``1 + (pool - need) // held``
such requests, ``need`` being the most free blocks one request asks at once
(the admission check, or a chunk's blocks and copies): each earlier one keeps
what its prefill left it, the next is refused at admission or preempted
mid-prefill when the rest of the pool is short (tests/support/oracle_concurrency.py
counts the same with vLLM's own scheduler).

Not modelled: prefix-cache hits (the requests share no prefix), KV
connectors, encoder inputs, ``long_prefill_token_threshold``, a watermark,
``prefix_cache_retention_interval`` other than vLLM's 0, and draft methods
other than DFlash.
"""

from __future__ import annotations

from dataclasses import dataclass

from geometry.kv.kv_spec import RequestBlocks
from geometry.kv.units import cdiv
from geometry.plan.limits import check_prefill_steps


def lookahead_tokens(speculating: bool, num_spec: int) -> int:
    """``VllmConfig.num_lookahead_tokens`` for a DFlash speculative config (the drafter runs a bonus
    query plus one per draft token): ``num_spec + 1``; no speculative config: 0."""
    return num_spec + 1 if speculating else 0


@dataclass(frozen=True)
class Scheduling:
    """What the scheduler splits and allocates a prefill by."""

    max_model_len: int
    batched_tokens: int  # max_num_batched_tokens: a step's token budget
    batches_in_flight: int  # max_concurrent_batches: steps scheduled before the first is handed back
    lookahead: int  # num_lookahead_tokens
    cache_block: int  # cache_config.block_size as the engine core leaves it (the mamba split's block)
    scheduler_block: int
    hash_block: int
    hit_alignment: int  # cache_hit_alignment_tokens

    @property
    def max_in_flight_tokens(self) -> int:
        """``VllmConfig.max_in_flight_tokens``."""
        return self.batches_in_flight * self.batched_tokens


@dataclass(frozen=True)
class Prefill:
    """One request's prefill: its chunks, what it holds after each, what admission asks."""

    prompt_tokens: int
    chunks: tuple[int, ...]
    held: tuple[int, ...]  # per group, after the last chunk
    peak_blocks: int  # the most it holds after any chunk (all groups)
    need_blocks: int  # the most free blocks it needs at once: admission, or a chunk's blocks and copies
    admission_blocks: int  # what the full-sequence admission check asks of the free pool

    @property
    def blocks(self) -> int:
        return sum(self.held)

    def requests(self, pool_blocks: int) -> int:
        """Requests admitted one after another from ``pool_blocks`` free blocks until one is refused."""
        if self.need_blocks > pool_blocks or not self.blocks:
            return 0
        return 1 + (pool_blocks - self.need_blocks) // self.blocks


def checkpoint_position(tokens: int, grid: int) -> int:
    """``get_mamba_prefill_checkpoint_position`` (no EAGLE block drop, no lookahead hashes): the last
    ``grid`` boundary before the prefill's last token."""
    return max((tokens - 1) // grid * grid, 0)


def checkpoint_valid(start: int, end: int, position: int, hash_block: int, block: int, alignment: int | None) -> bool:
    """``is_mamba_prefill_checkpoint_valid``: whether a backend can export the checkpoint inside the query."""
    if alignment is None:
        return False
    return (
        start % hash_block == 0
        and cdiv(end, block) - 2 > (start - 1) // block
        and start + hash_block <= position
        and start < position < end
        and (position - start) % alignment == 0
    )


def _state_groups(groups: tuple[RequestBlocks, ...]) -> list[RequestBlocks]:
    return [g for g in groups if g.rule == "state"]


def aligned_split(start: int, n: int, prompt: int, s: Scheduling, groups: tuple[RequestBlocks, ...]) -> int:
    """``Scheduler._mamba_block_aligned_split`` for a fresh request (no hit, no shared-prefix junction)."""
    if start >= prompt:
        return n
    states = _state_groups(groups)
    block = s.cache_block
    partial = s.hit_alignment < s.scheduler_block  # mamba_partial_cache_hit
    last_cache = checkpoint_position(prompt, block)
    end = start + n
    position = checkpoint_position(prompt, s.hash_block if partial else s.scheduler_block)
    internal = (
        all(g.state.checkpoint_blocks > 0 for g in states)
        and end >= prompt
        and checkpoint_valid(start, end, position, s.hash_block, block, states[0].state.checkpoint_alignment)
    )
    if internal:
        last_cache = 0
    if end < prompt:
        aligned = end // block * block
        if aligned > start or block <= s.batched_tokens:
            end = aligned
    tail = checkpoint_position(prompt, s.hash_block) if partial and not internal else 0
    stops = (
        (start // block + 1) * block if start % block and not internal else 0,
        last_cache,
        tail if last_cache < tail < prompt else 0,
    )
    end = min((x for x in stops if start < x < end), default=end)
    return max(end - start, 0)


def chunks(prompt: int, s: Scheduling, groups: tuple[RequestBlocks, ...]) -> tuple[int, ...]:
    """The prefill's chunk sizes, one step each (the request scheduled alone)."""
    align = any(g.state.align for g in _state_groups(groups))
    out, start = [], 0
    while start < prompt:
        n = min(prompt - start, s.batched_tokens)
        if align:
            n = aligned_split(start, n, prompt, s, groups)
        if n <= 0:
            raise ValueError(f"the scheduler cannot split a prompt of {prompt:,} tokens at {start:,}")
        out.append(n)
        start += n
    return tuple(out)


def admission_blocks(g: RequestBlocks, prompt: int, s: Scheduling) -> int:
    """The group's blocks in the admission check (``get_num_blocks_to_allocate`` for the whole prompt,
    ``apply_admission_cap``)."""
    b = g.block_size
    if g.rule == "per_token":
        return cdiv(prompt, b)
    if g.rule == "window":
        cap = cdiv(min(g.window - 1 + s.max_in_flight_tokens, s.max_model_len), b) + 1
        return min(cdiv(prompt, b), cap)
    if g.rule == "fixed":
        return g.fixed
    st = g.state
    if not st.align:
        return cdiv(prompt + b * st.speculative, b)
    checkpoint = int(needs_checkpoint(g, 0, prompt, prompt, s))
    return min(cdiv(prompt, b) + st.speculative, 1 + checkpoint + st.speculative)


def needs_checkpoint(g: RequestBlocks, start: int, end: int, prompt: int, s: Scheduling) -> bool:
    """``MambaManager._needs_internal_checkpoint`` for a query of a fresh request: only the chunk that
    ends the prompt reserves one."""
    st = g.state
    b = g.block_size
    return (
        st.align
        and st.checkpoint_blocks > 0
        and end >= prompt
        and cdiv(end, b) - 2 >= 0
        and checkpoint_valid(
            start, end, checkpoint_position(end, s.hit_alignment), s.hash_block, b, st.checkpoint_alignment
        )
    )


def prefill(groups: tuple[RequestBlocks, ...], tokens: int, s: Scheduling, pool: int | None = None) -> Prefill:
    """What a request of ``tokens`` tokens holds through its prefill, group by group; with ``pool`` (the
    free blocks), a request whose admission check asks more is refused before a step (no chunks, nothing
    held). limits.PrefillTooLong for a prefill longer than the model walks through."""
    prompt = tokens - 1
    admission = sum(admission_blocks(g, prompt, s) for g in groups)
    if pool is not None and admission > pool:
        return Prefill(prompt, (), (), admission, admission, admission)
    check_prefill_steps(tokens, s.batched_tokens)
    sizes = chunks(prompt, s, groups)
    length = [0] * len(groups)  # block-table entries (the window's include the freed ones)
    removed = [0] * len(groups)
    states: list[set[int]] = [set() for _ in groups]
    held: list[int] = [0] * len(groups)
    peak = need = 0
    partial = s.hit_alignment < s.scheduler_block
    tail = checkpoint_position(prompt, s.hash_block)
    start = 0
    for k, n in enumerate(sizes):
        end = start + n
        # MambaManager._cache_partial_tail_block: with hits at hash granularity, the chunk that ends on the
        # prompt's last hash boundary inside a mamba block keys that state for reuse, and the next
        # chunk's allocation copies it into a new block (copy-on-write), which it asks of the free pool.
        copies = 0
        if partial and k and start == tail and tail > 0:
            copies = sum(1 for g in groups if g.rule == "state" and g.state.align and tail % g.block_size)
        in_flight = sum(sizes[max(0, k - (s.batches_in_flight - 1)) : k])
        processed = max(0, start - in_flight)
        slots = min(end + s.lookahead, s.max_model_len)
        for i, g in enumerate(groups):
            b = g.block_size
            if g.rule == "per_token":
                held[i] = cdiv(slots, b)
            elif g.rule == "fixed":
                held[i] = g.fixed
            elif g.rule == "window":
                skipped = max(0, processed - g.window + 1) // b
                removed[i] = max(removed[i], min(skipped, length[i]))
                length[i] = max(length[i], cdiv(slots, b))
                held[i] = length[i] - removed[i]
            elif not g.state.align:
                skipped = (processed - 1) // b if processed > 1 else 0
                removed[i] = max(removed[i], min(skipped, length[i]))
                length[i] = max(length[i], cdiv(slots + b * g.state.speculative, b))
                held[i] = length[i] - removed[i]
            else:
                if processed >= 1:
                    first = (processed - 1) // b
                    states[i] = {x for x in states[i] if x >= first}
                states[i].add((end - 1) // b)
                held[i] = len(states[i]) + g.state.speculative + int(needs_checkpoint(g, start, end, prompt, s))
        peak = max(peak, sum(held))
        need = max(need, sum(held) + copies)
        start = end
    return Prefill(prompt, sizes, tuple(held), peak, max(need, admission), admission)
