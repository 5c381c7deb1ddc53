"""What one request holds, group by group, step after step, as the modelled vLLM release's KV-cache
managers allocate and free its blocks (stdlib only).

One ``Holdings`` per request. Each scheduler step that schedules ``n`` tokens of it from ``start``
(its computed tokens) first frees what ``remove_skipped_blocks`` frees at the processed tokens
(``start`` less the tokens still in flight), then asks the pool for the blocks the step's slots
need (``allocate_slots``: ``start + n`` plus the lookahead slots), by the rules admission.py
describes for a prefill, which hold the same in decode:

* full attention, MLA: ``ceil(slots / block)``, never freed while the request runs;
* the kpool tail ring: its fixed blocks;
* a sliding window: the blocks up to the slots, less those wholly before ``processed - (window - 1)``;
* a mamba state in "none" mode: ``ceil((slots + block x speculative) / block)``, less the blocks
  wholly before the processed tokens;
* a mamba state in "align" mode: one state block per step end, and on the step that ends the prompt
  the prefill checkpoint's block where the backend exports it there, each kept until the processed
  tokens pass its block; and the speculative blocks.
"""

from __future__ import annotations

from geometry.kv.kv_spec import RequestBlocks
from geometry.kv.units import cdiv
from geometry.plan.admission import Scheduling, checkpoint_position, needs_checkpoint


class Holdings:
    """One request's blocks per group (``held``), and the block-table state its managers keep."""

    __slots__ = (
        "groups", "s", "prompt", "length", "removed", "states", "held", "copies", "_next", "_next_length",
        "_next_states", "_tail", "_windows", "_nones", "_aligns",
    )  # fmt: skip

    def __init__(self, groups: tuple[RequestBlocks, ...], s: Scheduling, prompt: int) -> None:
        self.groups = groups
        self.s = s
        self.prompt = prompt
        self.length = [0] * len(groups)  # block-table entries (a window's include the freed ones)
        self.removed = [0] * len(groups)
        self.states: list[set[int]] = [set() for _ in groups]
        self.held = [0] * len(groups)
        self.copies = 0  # the copy-on-write blocks the last ``ask`` counted (the request does not keep them)
        self._next: list[int] | None = None
        # where a mamba group in "align" mode copies on write (hits at hash granularity): see ``ask``
        self._tail = checkpoint_position(prompt, s.hash_block) if s.hit_alignment < s.scheduler_block else -1
        # the groups that free blocks behind the processed tokens (free_skipped), by rule
        self._windows = tuple((i, g.block_size, g.window) for i, g in enumerate(groups) if g.rule == "window")
        self._nones = tuple((i, g.block_size) for i, g in enumerate(groups) if g.rule == "state" and not g.state.align)
        self._aligns = tuple((i, g.block_size) for i, g in enumerate(groups) if g.rule == "state" and g.state.align)

    @property
    def blocks(self) -> int:
        return sum(self.held)

    def free_skipped(self, processed: int) -> int:
        """``remove_skipped_blocks`` at ``processed`` tokens: the blocks it returns to the pool."""
        before = self.blocks
        for i, b, window in self._windows:
            skipped = max(0, processed - window + 1) // b
            self.removed[i] = max(self.removed[i], min(skipped, self.length[i]))
            self.held[i] = self.length[i] - self.removed[i]
        for i, b in self._nones:
            skipped = (processed - 1) // b if processed > 1 else 0
            self.removed[i] = max(self.removed[i], min(skipped, self.length[i]))
            self.held[i] = self.length[i] - self.removed[i]
        if processed >= 1:
            for i, b in self._aligns:
                first = (processed - 1) // b
                kept = {x for x in self.states[i] if x >= first}
                self.held[i] -= len(self.states[i]) - len(kept)
                self.states[i] = kept
        return before - self.blocks

    def ask(self, start: int, n: int) -> int:
        """The blocks a step of ``n`` tokens from ``start`` asks of the free pool (call ``take`` to keep
        them): what its slots need beyond what the request holds, and the copy-on-write block a
        mamba group in "align" mode copies at the prompt's last hash boundary (hits at hash
        granularity), which the request does not keep."""
        s = self.s
        end = start + n
        slots = min(end + s.lookahead, s.max_model_len)
        nxt = list(self.held)
        self._next_length = list(self.length)
        self._next_states = {}
        copies = 0
        tail = self._tail
        for i, g in enumerate(self.groups):
            b = g.block_size
            if g.rule == "per_token":
                nxt[i] = max(self.held[i], cdiv(slots, b))
            elif g.rule == "fixed":
                nxt[i] = g.fixed
            elif g.rule == "window":
                self._next_length[i] = max(self.length[i], cdiv(slots, b))
                nxt[i] = self._next_length[i] - self.removed[i]
            elif not g.state.align:
                self._next_length[i] = max(self.length[i], cdiv(slots + b * g.state.speculative, b))
                nxt[i] = self._next_length[i] - self.removed[i]
            else:
                states = self._next_states[i] = self.states[i] | self._written(g, start, end)
                nxt[i] = len(states) + g.state.speculative
                if start and start == tail and tail % b:
                    copies += 1
        self._next = nxt
        self.copies = copies
        return max(sum(nxt) - self.blocks, 0) + copies

    def _written(self, g: RequestBlocks, start: int, end: int) -> set[int]:
        """The state blocks a step from ``start`` to ``end`` writes in "align" mode: the state after its
        last token's block, and on the step that ends the prompt the prefill checkpoint's block
        (``cdiv(end, block) - 2``) where the backend exports it; both are freed as the processed tokens
        pass them."""
        b = g.block_size
        out = {(end - 1) // b}
        if start < self.prompt <= end and needs_checkpoint(g, start, end, self.prompt, self.s):
            out.add(cdiv(end, b) - 2)
        return out

    def take(self) -> None:
        """Keep what the last ``ask`` (for this step's chunk) counted."""
        for i, states in self._next_states.items():
            self.states[i] = states
        self.length = self._next_length
        self.held = self._next
        self._next = None

    def quiet(self, start: int, n: int, processed: int) -> int:
        """Steps of ``n`` tokens from ``start`` (``processed`` behind it), each one token further, over which
        no group allocates or frees a block: until the slots, the step's end or the processed tokens
        cross a block boundary that moves a rule above, or the slots reach max_model_len."""
        s = self.s
        end = start + n
        raw = end + s.lookahead
        out = s.max_model_len - raw if raw < s.max_model_len else 1 << 62
        for g in self.groups:
            b = g.block_size
            if g.rule == "per_token":
                marks = (raw + b - 1,)
            elif g.rule == "window":
                marks = (raw + b - 1, processed - g.window + 1)
            elif g.rule == "state" and not g.state.align:
                marks = (raw + b * g.state.speculative + b - 1, processed - 1)
            elif g.rule == "state":
                marks = (end - 1, processed - 1)
            else:
                marks = ()
            for x in marks:
                out = min(out, b - x % b)
        return out

    def linear_from(self) -> int:
        """The processed tokens from which ``free_skipped`` moves with them block for block: a window's
        ``window - 1`` (fewer skip nothing), a mamba state's 2 (fewer skip nothing); 0 without either."""
        out = 0
        for g in self.groups:
            if g.rule == "window":
                out = max(out, g.window - 1)
            elif g.rule == "state":
                out = max(out, 2)
        return out

    def key(self, shift: int = 0) -> tuple:
        """The block-table state, as it would stand ``shift`` tokens further on (``shift`` a multiple of
        every group's block below max_model_len): a per-token group's blocks, a window's or a "none"
        mamba state's entries and removed blocks, an "align" mamba state's state blocks, each that many
        blocks further; what a group holds otherwise unchanged (``shift`` moves nothing a fixed group
        holds, nor a group whose block no sequence crosses)."""
        out = []
        for i, g in enumerate(self.groups):
            d = shift // g.block_size if g.block_size < self.s.max_model_len else 0
            length, removed, held, states = self.length[i], self.removed[i], self.held[i], self.states[i]
            if g.rule == "per_token":
                held += d
            elif g.rule == "window" or (g.rule == "state" and not g.state.align):
                length, removed = length + d, removed + d
            elif g.rule == "state":
                states = {x + d for x in states}
            out.append((length, removed, held, frozenset(states)))
        return tuple(out)

    def shift(self, tokens: int) -> None:
        """Move the block-table state ``tokens`` further on, as ``key(tokens)`` says."""
        for i, (length, removed, held, states) in enumerate(self.key(tokens)):
            self.length[i], self.removed[i], self.held[i], self.states[i] = length, removed, held, set(states)

    def most(self, last_token: int) -> int:
        """A bound on what the request can hold from now until its sequence reaches ``last_token``
        tokens (its prompt and output): a per-token group's blocks at the last slot, and what a
        window or a mamba state keeps with the most tokens in flight."""
        s = self.s
        reach = s.max_in_flight_tokens + s.lookahead
        slots = min(last_token + s.lookahead, s.max_model_len)
        out = 0
        for held, g in zip(self.held, self.groups):
            b = g.block_size
            if g.rule == "per_token":
                cap = cdiv(slots, b)
            elif g.rule == "fixed":
                cap = g.fixed
            elif g.rule == "window":
                cap = min(cdiv(g.window - 1 + reach, b) + 2, cdiv(slots, b))
            elif not g.state.align:
                cap = cdiv(reach + b * g.state.speculative, b) + 2
            else:
                cap = cdiv(reach, b) + 2 + g.state.speculative + g.state.checkpoint_blocks
            out += max(held, cap)
        return out
