"""Requests sent together: the modelled vLLM release's scheduler stepped over block counts (stdlib only).

``run`` sends ``sent`` requests of one prompt length and one output length at once and steps them
the way ``Scheduler.schedule`` and ``Scheduler.update_from_output`` do
(vllm/v1/core/sched/scheduler.py) for requests that share no prefix, under the first-come policy:

* each step has ``max_num_batched_tokens`` tokens; the running requests are scheduled first, in
  the order they were admitted, each its next prefill chunk (the mamba block-aligned split in
  "align" mode) or its decode tokens (one, plus the drafts the drafter proposed for it); a
  running request whose blocks the pool cannot give is where vLLM preempts;
* then, when no request was preempted, waiting requests are admitted while the budget lasts and
  fewer than ``max_num_seqs`` run: each only if its whole prompt fits the free pool (the
  full-sequence admission check) and its first chunk's blocks do; the first that does not waits;
* the copy-on-write block a mamba group in "align" mode asks at the prompt's last hash boundary
  (holdings.py) is taken for its step only: ``schedule`` hands the copy's retention back to the pool
  once the step is scheduled (``_free_cow_retained_blocks``, at once without a KV connector);
* a step's tokens count as computed when it is scheduled; with ``max_concurrent_batches`` steps in
  flight (two with async scheduling) a step is handed back one step later (the engine core's batch
  queue), and until then its tokens are in flight (``remove_skipped_blocks`` frees only behind the
  processed tokens); async scheduling schedules decodes ahead with output placeholders;
* a handed-back step samples one token for each of its requests that is past its prompt; drafts
  are proposed for each and none is accepted (a drafter that guesses wrong); a request that has
  its ``output`` tokens (or reaches ``max_model_len``) finishes and frees its blocks.

Steps that change a request in a steady decode by nothing but one computed and one output token are
passed over and counted at once (together_leaps.py: ``freeze``, ``thaw``); when every running request is
frozen and none waits, or those waiting were refused in a step that scheduled and freed nothing, the run
leaps to the first step one is thawed in. Steps of prefill chunks that repeat are leaped over too
(together_leaps.py: ``Mark``): when the steps since one that scheduled prefill chunks only
(``prefilling``) left the run as it stood but each request that is not frozen a whole number of blocks
further on (``shift_unit``: its block table shifted as far, ``Holdings.key``), the blocks held not fewer,
every step from there repeats the same steps shifted, and the run passes over as many such periods as end
short of the points where a prefill's chunks or blocks stop repeating (``room``), before a frozen request
is due and within the pool. ``run(stepped=True)`` steps every request one step at a time, with no leap,
to the same run. What a run steps (the workload, the stepping settings, each request's state):
together_state.py.

``requests_at_once`` is the one definition the gate reports: the largest N such that N requests
sent together all run at once, admitted as vLLM admits them, without a preemption.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from geometry.kv.kv_spec import RequestBlocks
from geometry.plan import together_leaps as leaps
from geometry.plan.admission import Scheduling, admission_blocks, aligned_split
from geometry.plan.holdings import Holdings
from geometry.plan.limits import check_together
from geometry.plan.together_state import Request, Stepping, Workload

# The definition, written once: the report header and docs/gate.md quote it.
DEFINITION = (
    "requests at once: the largest N such that N requests of the prompt and output length, sent "
    "together and admitted as vLLM's scheduler admits them, all run at once without a preemption"
)


@dataclass(frozen=True)
class Run:
    """``sent`` requests sent together, stepped until they finish or one is preempted."""

    sent: int
    peak_running: int  # the most running together
    preempted_at: int | None  # the step of the first preemption (None: none)
    steps: int
    peak_blocks: int  # the most blocks the requests held at once
    after_prefill_blocks: int  # what the first request held after its last prefill step
    decode_blocks: int  # the most the first request held while it decoded
    peak_steps: int  # the longest run of consecutive steps with ``peak_running`` running (before a preemption)

    @property
    def all_ran(self) -> bool:
        """All ``sent`` ran at once and none was preempted."""
        return self.preempted_at is None and self.peak_running == self.sent


def run(
    groups: tuple[RequestBlocks, ...],
    s: Scheduling,
    st: Stepping,
    free: int,
    work: Workload,
    sent: int,
    to_the_end: bool = False,
    stepped: bool = False,
) -> Run:
    """Step ``sent`` requests of ``work`` sent together on ``free`` blocks (the pool less the null block):
    until all finish (``to_the_end``), else until what they can still hold is known to fit. A request in a
    steady decode is frozen over the steps that repeat its last one (together_leaps.freeze), and periods of
    prefill steps that repeat by a shift are leaped over (together_leaps.Mark), unless ``stepped``: then every
    request is stepped one step at a time (the same run, slower)."""
    check_together(work.prompt, work.output, s.batched_tokens, sent)
    reqs = [Request(Holdings(groups, s, work.prompt)) for _ in range(sent)]
    waiting = deque(reqs)
    running: list[Request] = []
    queue: deque = deque()
    admission = sum(admission_blocks(g, work.prompt, s) for g in groups)
    aligned = leaps.aligned(groups)
    first_chunk: dict[int, int] = {}  # a waiting request's first chunk by the budget left for it (aligned_split)
    first = reqs[0]
    peak_running = peak_blocks = steps = 0
    after_prefill = decode_peak = 0
    held = peak_steps = 0  # consecutive steps at peak_running so far, and the longest such stretch
    used = 0
    bounded = False
    mark: leaps.Mark | None = None  # a step of prefill chunks (leaps.prefilling), while each step since was one
    unit = leaps.shift_unit(groups, s)
    while waiting or running:
        steps += 1
        step: dict[Request, tuple[int, int, bool]] = {}
        budget = s.batched_tokens
        copies = 0  # copy-on-write blocks asked this step: the pool has them back when the step is scheduled
        high = 0  # the most blocks held once a request's blocks were taken in this step
        for i, r in enumerate(running):
            if budget <= 0:
                for rest in running[i:]:
                    leaps.thaw(rest, steps, queue)
                break
            if r.until:
                if steps < r.until and budget >= r.want:
                    budget -= r.want
                    continue
                leaps.thaw(r, steps, queue)
            r.still = False
            if st.async_scheduling and r.placeholders > 0 and r.computed + 2 - r.placeholders >= work.tokens:
                continue
            r.want = work.prompt + r.outputs + r.drafts + r.placeholders - r.computed
            n = min(r.want, budget, s.max_model_len - r.computed - 1)
            n = aligned_split(r.computed, n, work.prompt, s, groups) if aligned else n
            if n <= 0:
                continue
            freed = r.hold.free_skipped(max(0, r.computed - r.in_flight))
            used -= freed
            need = r.hold.ask(r.computed, n)
            r.still = not (freed or need)
            if need > free - used:
                return Run(sent, peak_running, steps, steps, peak_blocks, after_prefill, decode_peak, peak_steps)
            r.hold.take()
            used += need
            if used > high:
                high = used
            copies += r.hold.copies
            spec = min(r.drafts, n + r.computed - work.prompt - r.outputs - r.placeholders) if r.drafts else 0
            r.drafts = 0
            step[r] = (n, max(spec, 0), False)
            budget -= n
        while budget > 0 and waiting and len(running) < st.max_running:
            r = waiting[0]
            n = min(work.prompt, budget)
            if aligned:  # a fresh request's first chunk depends on the budget alone
                if n not in first_chunk:
                    first_chunk[n] = aligned_split(0, n, work.prompt, s, groups)
                n = first_chunk[n]
            if n <= 0 or admission > free - used:
                break
            need = r.hold.ask(0, n)
            if need > free - used:
                break
            r.hold.take()
            used += need
            running.append(waiting.popleft())
            step[r] = (n, 0, False)
            budget -= n
        used -= copies
        for r, (n, spec, _) in list(step.items()):
            r.computed += n
            r.in_flight += n
            prefilling = r.computed < work.prompt + r.outputs + r.placeholders
            step[r] = (n, spec, not prefilling)
            if st.async_scheduling and not prefilling:
                r.placeholders += 1 + spec
                r.drafts = st.num_spec
        if len(running) > peak_running:
            peak_running, held, peak_steps = len(running), 0, 0
        held = held + 1 if len(running) == peak_running else 0
        peak_steps = max(peak_steps, held)
        peak_blocks = max(peak_blocks, used)
        queue.appendleft(step)
        back = 0  # the blocks the step handed back frees
        if len(queue) >= s.batches_in_flight or not (step or waiting or running):
            back = _hand_back(queue.pop(), running, work, st, s)
            used -= back
        if not stepped:
            leaps.freeze(step, steps, st, work)
        if first.computed >= work.prompt and not after_prefill:
            after_prefill = first.hold.blocks
        elif after_prefill and not first.done:
            decode_peak = max(decode_peak, first.hold.blocks)
        if not step and not any(queue) and waiting and not running:
            break  # one request asks more than the whole pool: it waits for ever
        if not to_the_end and not waiting and not bounded and len(running) == sent:
            bounded = True  # asked once, when the last is admitted
            if sum(r.hold.most(work.tokens + st.num_spec + 1) for r in running) <= free:
                break  # all run, and what they can still hold fits: no preemption is left to come
        if running and all(r.until for r in running) and not (waiting and (step or back)):
            # every step until then repeats for all (those waiting refused each time, as in this step, which
            # scheduled nothing and freed nothing): leap to it
            leap = min(r.until for r in running) - 1
            if held and len(running) == peak_running:  # (a request finished in this step ends the stretch)
                held += leap - steps
                peak_steps = max(peak_steps, held)
            steps = leap
        if stepped:
            continue
        if not leaps.prefilling(step, running):
            mark = None
            continue
        if mark is None or mark.early:
            mark = leaps.Mark(steps, used, queue, running, waiting, s)
            continue
        mark.top_take, mark.top_end = max(mark.top_take, high), max(mark.top_end, used)
        moved = mark.moved(unit)
        if moved is None:
            continue  # a request is not yet a whole number of units further on
        q = mark.periods(moved, steps, used, queue, running, waiting, free, work, s)
        if q > 0:  # each of the next q periods of steps repeats the last, the requests ``moved`` further on
            grow = used - mark.used
            peak_blocks = max(peak_blocks, mark.top_end + q * grow)
            used += q * grow
            for (r, *_), dt in zip(mark.active, moved):
                r.computed += q * dt
                r.want -= q * dt
                r.hold.shift(q * dt)
            if held:
                held += q * (steps - mark.steps)
                peak_steps = max(peak_steps, held)
            steps += q * (steps - mark.steps)
        mark = leaps.Mark(steps, used, queue, running, waiting, s)  # the next period is counted from here
    return Run(sent, peak_running, None, steps, peak_blocks, after_prefill, decode_peak, peak_steps)


def requests_at_once(
    groups: tuple[RequestBlocks, ...],
    s: Scheduling,
    st: Stepping,
    free: int,
    work: Workload,
    stepped: bool = False,
    start: int = 1,
) -> tuple[int, Run | None, Run | None]:
    """``(N, the run of N, the run of N + 1)``: the largest N whose run all ran (at most ``max_num_seqs``, and
    no more than the free blocks: each request holds one). A run that all ran says every smaller one does
    (fewer requests draw less from the same pool at the same steps), so the count is searched for from
    ``start`` (a guess: the nearer, the fewer runs), in steps doubling away from it until a run that all ran
    and one that did not enclose it, then by halving between them."""
    limit = min(st.max_running, free)
    runs: dict[int, Run] = {}

    def ran(n: int) -> bool:
        if n not in runs:
            runs[n] = run(groups, s, st, free, work, n, stepped=stepped)
        return runs[n].all_ran

    lo, hi = 0, limit + 1  # lo all ran (none sent), hi did not (above the limit)
    guess, step = min(max(start, 1), limit), 1
    if guess >= 1 and ran(guess):
        lo = guess
        while lo < limit:
            nxt = min(lo + step, limit)
            if not ran(nxt):
                hi = nxt
                break
            lo, step = nxt, step * 2
    elif guess >= 1:
        hi = guess
        while hi > 1:
            nxt = max(hi - step, 1)
            if ran(nxt):
                lo = nxt
                break
            hi, step = nxt, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ran(mid) else (lo, mid)
    last = runs.get(lo) if lo else None
    over = None
    if hi <= limit:
        ran(hi)
        over = runs[hi]
    return lo, last, over


def _hand_back(step: dict, running: list[Request], work: Workload, st: Stepping, s: Scheduling) -> int:
    """``update_from_output`` for a handed-back step: the blocks the requests it finishes free."""
    freed = 0
    for r, (n, spec, samples) in step.items():
        if r.until:  # frozen: its steps are counted when it is thawed
            continue
        r.in_flight -= n
        if r.done or not samples:
            continue
        if spec:  # every draft rejected
            r.computed -= spec
            if r.placeholders > 0:
                r.placeholders -= spec
        r.outputs += 1
        if r.placeholders > 0:
            r.placeholders -= 1
        if r.outputs >= work.output or work.prompt + r.outputs >= s.max_model_len:
            r.done = True
            running.remove(r)
            freed += r.hold.blocks
        elif not st.async_scheduling and st.num_spec:
            r.drafts = st.num_spec
    return freed
