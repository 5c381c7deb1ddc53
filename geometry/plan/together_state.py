"""What a run of requests sent together steps (geometry/plan/together.py; stdlib only): each request's
workload, the scheduler's stepping settings beyond a prefill's, and the state of one request as the run
steps it."""

from __future__ import annotations

from dataclasses import dataclass

from geometry.plan.holdings import Holdings

# A length reported without an output (the gate report's lengths, ``--lengths`` without one): a prompt and
# an output that make the length, the output a quarter of it up to this many tokens (long enough that the
# first request still decodes while the last is admitted at the default recipe's lengths).
DEFAULT_OUTPUT_TOKENS = 4_096


@dataclass(frozen=True)
class Workload:
    """One request's prompt tokens and output tokens (``max_tokens``, the end of sequence ignored)."""

    prompt: int
    output: int

    @property
    def tokens(self) -> int:
        return self.prompt + self.output


def workload(tokens: int, output: int | None = None) -> Workload:
    """The workload of a reported length: ``tokens`` prompt tokens and ``output``, or, without an output, a
    length of ``tokens`` split as DEFAULT_OUTPUT_TOKENS says: output ``min(4096, max(tokens // 4, 1))``,
    the prompt the rest."""
    if output is not None:
        return Workload(tokens, output)
    out = min(DEFAULT_OUTPUT_TOKENS, max(tokens // 4, 1))
    return Workload(tokens - out, out)


@dataclass(frozen=True)
class Stepping:
    """What the scheduler steps requests by, beyond a prefill's ``Scheduling``."""

    max_running: int  # max_num_seqs
    num_spec: int  # drafts proposed per decode step (num_speculative_tokens)
    async_scheduling: bool  # output placeholders: decodes scheduled ahead


class Request:
    """One request as the run steps it: its blocks (``hold``), its tokens, and its frozen steps (together_leaps)."""

    __slots__ = (
        "hold", "computed", "in_flight", "outputs", "placeholders", "drafts", "done",
        "want", "still", "last", "until", "base", "sched",
    )  # fmt: skip

    def __init__(self, hold: Holdings) -> None:
        self.hold = hold
        self.computed = 0
        self.in_flight = 0
        self.outputs = 0
        self.placeholders = 0
        self.drafts = 0
        self.done = False
        self.want = 0  # the tokens it asked for in its last step, before the budget and the split
        self.still = False  # its last step allocated and freed nothing
        self.last = (
            None  # the step it last decoded steadily in, and its state at that step's end (together_leaps.freeze)
        )
        self.until = 0  # frozen in a steady decode until this step (0: not frozen; together_leaps.freeze)
        self.base = 0  # the step it was frozen at
        self.sched = (0, 0)  # the tokens and drafts each of its frozen steps schedules
