"""How a run of requests sent together (geometry/plan/together.py) passes over steps that repeat
(stdlib only).

* A request in a steady decode is frozen (``freeze``) over the steps that change it by nothing but one
  computed and one output token (``quiet_steps``), and thawed (``thaw``) when its steps are counted.
* A step of prefill chunks only (``prefilling``) is marked (``Mark``); when the steps since leave the run as
  it stood but each request not frozen a whole number of ``shift_unit`` tokens further on, ``Mark.periods``
  says how many more such periods repeat before a prefill's chunks or blocks stop repeating (``room``).
"""

from __future__ import annotations

from collections import deque
from math import lcm

from geometry.kv.kv_spec import RequestBlocks
from geometry.plan.admission import Scheduling, checkpoint_position
from geometry.plan.together_state import Request, Stepping, Workload


def freeze(step: dict, steps: int, st: Stepping, work: Workload) -> None:
    """Freeze each request whose last two steps were the same steady decode: it decoded, scheduled all it
    asked for (the same tokens and drafts), allocated and freed nothing, and ended each step with the same
    tokens in flight, placeholders and drafts, its computed and output tokens one more per step. Its next
    steps repeat the last (each one token further) until one would cross a block boundary or come near its
    end (quiet_steps): frozen, it is passed over in those steps, its budget taken, and thawed (thaw) at
    the step after them, or earlier when the budget left for it is short."""
    for r, (n, spec, samples) in step.items():
        if r.done or r.until or not (samples and r.still and n == r.want):
            continue
        state = (steps, n, spec, r.computed - steps, r.outputs - steps, r.in_flight, r.placeholders, r.drafts)
        skip = quiet_steps(r, n, st, work) if r.last == (steps - 1, *state[1:]) else 0
        r.last = state
        if skip > 0:
            r.until, r.base, r.sched = steps + skip + 1, steps, (n, spec)


def thaw(r: Request, steps: int, queue: deque) -> None:
    """A frozen request as it stands at the start of step ``steps``: one token computed and one output per
    step passed over, and its entry in each step still in flight (each scheduled the same)."""
    if not r.until:
        return
    passed = steps - 1 - r.base
    r.computed += passed
    r.outputs += passed
    r.until = 0
    for pending in queue:
        pending[r] = (*r.sched, True)


def quiet_steps(r: Request, n: int, st: Stepping, work: Workload) -> int:
    """Steps of a steady decode that change nothing but the request's computed and output tokens (one
    each per step): fewer than it takes it to cross a block boundary that allocates or frees a block, or
    to come near its end (then its steps are walked one by one again)."""
    near_end = work.output - r.outputs - 3 - st.num_spec - r.placeholders
    start = r.computed - 1  # where its last step started (one token a step), and what it had processed
    return max(min(near_end, r.hold.quiet(start, n, max(0, start - r.in_flight))) - 2, 0)


def prefilling(step: dict, running: list[Request]) -> bool:
    """Whether a step scheduled prefill chunks only, with no copy-on-write block, and every running request
    is frozen (freeze) or in its prefill: nothing sampled, admitted or thawed."""
    for r, (_n, _spec, samples) in step.items():
        if samples or r.hold.copies:
            return False
    return bool(step) and all(r.until or not (r.outputs or r.placeholders or r.drafts) for r in running)


class Mark:
    """A step of prefill chunks (prefilling) as it ended, which later such steps are compared with: the
    steps and blocks held then, the running and waiting requests and the steps in flight, and for each
    request not frozen (``active``) its computed tokens, tokens in flight, stillness and block table
    (Holdings.key). ``top_take``, ``top_end``: the most blocks held since, once a request's blocks were
    taken in a step and at a step's end."""

    def __init__(
        self, steps: int, used: int, queue: deque, running: list[Request], waiting: deque, s: Scheduling
    ) -> None:
        self.steps, self.used = steps, used
        self.others = (tuple(running), len(waiting), queued(queue))
        self.active = [(r, r.computed, r.in_flight, r.still, r.hold.key()) for r in running if not r.until]
        self.top_take = self.top_end = 0
        # a request had processed too few tokens to free block for block when this step began, so its block
        # table may not repeat by a shift yet (periods): mark a later step (a step's chunk at most moves it on)
        self.early = any(c - f - s.batched_tokens < r.hold.linear_from() for r, c, f, *_ in self.active)

    def moved(self, unit: int) -> list[int] | None:
        """The tokens each active request computed since, if each is a whole number of ``unit``s."""
        if (self.active[0][0].computed - self.active[0][1]) % unit:
            return None  # the first is not (the most often asked)
        out = [r.computed - computed for r, computed, *_ in self.active]
        return None if any(dt % unit for dt in out) else out

    def periods(
        self, moved: list[int], steps: int, used: int, queue: deque, running: list[Request], waiting: deque,
        free: int, work: Workload, s: Scheduling,
    ) -> int:  # fmt: skip
        """How many more periods of ``steps - self.steps`` steps repeat the steps since exactly (0: none).
        The steps since form a period when some request moved on and the run stands as it stood, each
        active request ``moved`` tokens further on (its block table shifted as far, its tokens in flight
        and stillness the same), the blocks held not fewer, and each request that moved processed past
        where its groups free block for block. By the shift the steps' chunks, blocks asked and freed, and
        admissions refused are the same (the blocks held each period ``used - self.used`` more) while each
        step's chunks end short of every point the split or the blocks stop at (the prompt's end, its last
        cache block and hash boundaries, max_model_len less the lookahead), the frozen requests are not
        due (thaw), and the most blocks held once taken stay within the pool."""
        grow, ds = used - self.used, steps - self.steps
        if not any(moved) or grow < 0 or (tuple(running), len(waiting), queued(queue)) != self.others:
            return 0
        q = 1 << 62
        for (r, computed, in_flight, still, key), dt in zip(self.active, moved):
            if r.until or r.in_flight != in_flight or r.still != still or r.hold.key(-dt) != key:
                return 0
            if dt:
                if computed - in_flight < r.hold.linear_from():
                    return 0
                q = min(q, (room(computed, work, s) - 1 - s.batched_tokens - r.computed) // dt)
        due = [r.until for r in running if r.until]
        if due:
            q = min(q, (min(due) - 1 - steps) // ds)
        if grow:
            q = min(q, (free - self.top_take) // grow)
        return q


def room(computed: int, work: Workload, s: Scheduling) -> int:
    """The first point after ``computed`` tokens where a prefill's chunks stop repeating by a shift: the
    prompt's end, its last cache block, hash and scheduler block boundaries (the split's stops, the
    copy-on-write block), or where the slots reach max_model_len."""
    points = (checkpoint_position(work.prompt, b) for b in (s.cache_block, s.hash_block, s.scheduler_block))
    return min(work.prompt, s.max_model_len - s.lookahead + 1, *(x for x in points if x > computed))


def queued(queue: deque) -> tuple:
    return tuple(tuple(pending.items()) for pending in queue)


def shift_unit(groups: tuple[RequestBlocks, ...], s: Scheduling) -> int:
    """The tokens a prefill's chunks repeat by a shift of: a multiple of the cache block in "align" mode
    (the split's) and of every group's block that a sequence can cross (below max_model_len)."""
    blocks = [g.block_size for g in groups if g.block_size < s.max_model_len]
    return lcm(s.cache_block if aligned(groups) else 1, *blocks)


def aligned(groups: tuple[RequestBlocks, ...]) -> bool:
    return any(g.rule == "state" and g.state.align for g in groups)
