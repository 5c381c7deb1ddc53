"""Requests sent together (geometry/plan/together.py) on one mamba group in "align" mode with prefix-cache
hits at hash granularity, by hand: the copy-on-write block a request asks at its prompt's last hash
boundary is taken from the pool for the step that asks it and is back in the pool once the step is
scheduled (``Scheduler.schedule`` releases the copy's retention at once without a KV connector:
``_free_cow_retained_blocks`` in vllm/v1/core/sched/scheduler.py); the request does not keep it.

The case: the mamba block 8 tokens (the cache and scheduler block), hash block and hit alignment 4 (hits
every 4 tokens, finer than the block: ``mamba_partial_cache_hit``), no speculation, no lookahead, one batch
in flight, 10 tokens a step. Prompts of 6 tokens, 3 output tokens. A prompt's last hash boundary is
``(6 - 1) // 4 x 4 = 4``, inside block 0: the split (``_mamba_block_aligned_split``) stops the first chunk
there (0..4), and the second chunk (4..6) copies the state at 4 into a new block. With a budget under the
whole prompt the split gives no chunk (the block, 8, is not past the budget: ``end // 8 x 8 = 0``), so a
request is admitted only with 6 tokens of budget left. Each request holds one state block (the state
after its last token lies in block 0 throughout: position 8 is never reached); admission asks 1 block.
"""

from __future__ import annotations

from geometry.kv.kv_spec import RequestBlocks, StateBlocks
from geometry.plan.admission import Scheduling
from geometry.plan.together import run
from geometry.plan.together_state import Stepping, Workload

GROUPS = (RequestBlocks("state", 8, state=StateBlocks(align=True, speculative=0)),)
S = Scheduling(1024, 10, 1, 0, 8, 8, 4, 4)
ST = Stepping(max_running=128, num_spec=0, async_scheduling=False)
WORK = Workload(6, 3)


def test_the_copy_is_back_in_the_pool_once_the_step_is_scheduled():
    # 4 free blocks, 3 requests sent together:
    # step 1: r0 admitted, 0..4, 1 block (6 of the budget left); r1 admitted, 0..4, 1 block (2 left: r2 gets
    #   no chunk and waits). Held: 2.
    # step 2: r0 4..6 asks its copy (3 taken), r1 4..6 its copy (4 taken); r2's admission finds 0 free and it
    #   waits. Scheduled, the 2 copies go back: 2 held. r0 and r1 sample their first output token.
    # step 3: r0 and r1 decode one token each (6 -> 7, the state still in block 0: no block); r2 admitted
    #   with 8 of the budget, 0..4, 1 block: 3 held.
    # step 4: r0 and r1 decode (7 -> 8); r2 4..6 asks its copy: 4 taken of 4. r0 samples its third output
    #   token and finishes: all three ran at once (steps 3 and 4), none preempted.
    # Kept as held, the copies would leave 0 free after step 2: r2 would wait until r0 finishes.
    together = run(GROUPS, S, ST, 4, WORK, 3)
    assert (together.peak_running, together.preempted_at, together.all_ran) == (3, None, True)


def test_the_copy_is_asked_of_the_pool_in_its_step():
    # 3 free blocks: step 1 as above (2 held); step 2 r0's copy takes the third, and r1's copy finds none:
    # r1 is preempted at step 2, though after the step two requests hold only 2 blocks.
    short = run(GROUPS, S, ST, 3, WORK, 2)
    assert (short.preempted_at, short.all_ran) == (2, False)
