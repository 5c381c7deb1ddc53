"""Requests sent together (geometry/plan/together.py) on one full-attention group, by hand: blocks of 16
tokens, prompts of 32 tokens (2 blocks), 17 output tokens. The prefill step samples the first output
token; 16 decode steps then compute positions 32..47, the last one's slots reaching 48 tokens: 3 blocks.
The whole prompt fits at admission with 2 free blocks; the third is asked at the first decode step
(slots 33)."""

from __future__ import annotations

from geometry.kv.kv_spec import RequestBlocks
from geometry.plan.admission import Scheduling, prefill
from geometry.plan.together import requests_at_once, run
from geometry.plan.together_state import Stepping, Workload

GROUPS = (RequestBlocks("per_token", 16),)
S = Scheduling(1024, 64, 1, 0, 16, 16, 16, 16)  # 64 tokens a step: two prompts of 32 in one step
ST = Stepping(max_running=128, num_spec=0, async_scheduling=False)
WORK = Workload(32, 17)


def test_one_request_needs_its_last_slot_s_blocks():
    assert run(GROUPS, S, ST, 3, WORK, 1).all_ran
    alone = run(GROUPS, S, ST, 3, WORK, 1, to_the_end=True)
    assert (alone.after_prefill_blocks, alone.decode_blocks) == (2, 3)
    # With 2 free blocks it is admitted (its prompt fits) and preempted at its first decode step (step 2).
    short = run(GROUPS, S, ST, 2, WORK, 1)
    assert (short.preempted_at, short.all_ran) == (2, False)


def test_two_admitted_together_are_preempted_where_the_after_prefill_count_says_they_fit():
    # 5 free: both prompts fit in step 1 (4 blocks); at step 2 the first takes the 5th block for its
    # slot 33 and the second finds none: a preemption. 6 free: both run to the end.
    assert requests_at_once(GROUPS, S, ST, 5, WORK)[0] == 1
    assert requests_at_once(GROUPS, S, ST, 6, WORK)[0] == 2
    # Each keeping what its prefill left (2 blocks) and never decoding, 5 blocks hold 1 + (5 - 2) // 2 = 2.
    assert prefill(GROUPS, 33, S, 5).requests(5) == 2


def test_one_more_than_the_pool_admits_waits_and_is_not_counted():
    # 9 free. Step 1 admits two prompts (the 64-token budget); step 2 decodes them (3 blocks each: 6) and
    # admits a third (8); the fourth's prompt (2 blocks) no longer fits and it waits until the first
    # finishes: three run at once, none preempted.
    count, last, over = requests_at_once(GROUPS, S, ST, 9, WORK)
    assert count == 3 and last.all_ran
    assert (over.sent, over.peak_running, over.preempted_at) == (4, 3, None)


def test_a_request_the_pool_never_holds_waits_and_the_run_ends_with_steps_in_flight():
    # Async scheduling (two steps in flight): with 1 free block the prompt's 2 never fit; step 1 admits
    # nothing and the run ends there, the empty step still in flight, none running.
    s = Scheduling(1024, 64, 2, 0, 16, 16, 16, 16)
    st = Stepping(max_running=128, num_spec=0, async_scheduling=True)
    alone = run(GROUPS, s, st, 1, WORK, 1, to_the_end=True)
    assert (alone.peak_running, alone.preempted_at, alone.steps, alone.all_ran) == (0, None, 1, False)
    assert requests_at_once(GROUPS, s, st, 1, WORK)[0] == 0
