"""Requests sent together (geometry/plan/together.py): the run that freezes a request over the steps of a
steady decode and leaps when all are frozen is the run that steps every request one step at a time
(``stepped=True``), field for field, on random small workloads and pools of every group rule; and the
count found by doubling then halving is the count found by trying one more request at a time, the runs
that all ran being those below the first that did not (fewer requests sent together never fare worse).

The pools, blocks and budgets are small so that one run covers prefill chunks, admissions held back,
block boundaries, finishes, preemptions and requests left waiting within a few hundred steps.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from geometry.kv.kv_spec import RequestBlocks, StateBlocks
from geometry.plan.admission import Scheduling
from geometry.plan.together import requests_at_once, run
from geometry.plan.together_state import Stepping, Workload

RULES = ("per_token", "window", "fixed", "state_none", "state_align")


@hs.composite
def together_cases(draw):
    """(groups, Scheduling, Stepping, free blocks, Workload)."""
    block = draw(hs.sampled_from((4, 8, 16)))
    spec = draw(hs.sampled_from((0, 1, 3)))
    groups = []
    for rule in draw(hs.lists(hs.sampled_from(RULES), min_size=1, max_size=3, unique=True)):
        if rule == "per_token":
            groups.append(RequestBlocks("per_token", block))
        elif rule == "window":
            groups.append(RequestBlocks("window", block, window=draw(hs.integers(2, 3 * block))))
        elif rule == "fixed":
            groups.append(RequestBlocks("fixed", block, fixed=1))
        else:
            state = StateBlocks(rule == "state_align", spec, 1 if rule == "state_align" else 0, 1)
            groups.append(RequestBlocks("state", block, fixed=2, state=state))
    in_flight = draw(hs.sampled_from((1, 2)))
    s = Scheduling(
        draw(hs.sampled_from((192, 512))),
        block * draw(hs.sampled_from((1, 2, 4, 8))),
        in_flight,
        spec + 1 if spec else 0,
        block,
        block,
        block,
        block,
    )
    st = Stepping(draw(hs.integers(1, 8)), spec, in_flight > 1)
    work = Workload(draw(hs.integers(1, 90)), draw(hs.integers(1, 90)))
    return tuple(groups), s, st, draw(hs.integers(1, 60)), work


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(together_cases(), hs.integers(1, 8), hs.booleans())
def test_freezing_steady_decodes_changes_no_run(case, sent, to_the_end):
    groups, s, st, free, work = case
    frozen = run(groups, s, st, free, work, sent, to_the_end)
    assert frozen == run(groups, s, st, free, work, sent, to_the_end, stepped=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(together_cases())
def test_the_count_is_one_more_at_a_time_and_fewer_never_fare_worse(case):
    groups, s, st, free, work = case
    limit = min(st.max_running, free)
    ran = [run(groups, s, st, free, work, n, stepped=True).all_ran for n in range(1, limit + 1)]
    count = ran.index(False) if False in ran else limit
    assert not any(ran[count:]), ran  # none after the first that did not all run
    n, last, over = requests_at_once(groups, s, st, free, work)
    assert n == count
    assert (last is None) == (n == 0) and (last is None or last.all_ran)
    assert (over is None) == (n == limit) and (over is None or not over.all_ran)
