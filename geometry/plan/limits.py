"""The sizes the admission model steps through, checked before it loops (stdlib only).

The model walks a prefill chunk by chunk (admission.py): a prompt of ``tokens`` tokens takes
about ``tokens / max_num_batched_tokens`` scheduler steps (at most twice that with the mamba
block-aligned split, which stops a chunk at a cache-block boundary). A request longer than the
pool holds is refused at admission without a step (``admission.prefill`` with the pool); a
request the pool holds but whose prefill takes more than ``MAX_PREFILL_STEPS`` steps is beyond
what the model walks through: the gate refuses a ``max_model_len`` whose prefill is
(serving_limits.py: one reason naming the length and the step budget), and the model answers no
count for such a length ("-") rather than walk through it (``PrefillTooLong`` from admission.py).
"""

from __future__ import annotations

from geometry.errors import BadInput
from geometry.kv.units import cdiv

# Scheduler steps of one request's prefill the model walks through: a 1M-token prompt in steps of
# 64 tokens, 16 times the default recipe's longest (1M in steps of 16,384 tokens: 64 steps).
MAX_PREFILL_STEPS = 16_384


class PrefillTooLong(BadInput):
    """A request's prefill takes more scheduler steps than the admission model walks through."""


def prefill_steps_reason(tokens: int, batched_tokens: int) -> str | None:
    """Why a request of ``tokens`` tokens (a prompt of ``tokens - 1``) is beyond the model: its prefill
    takes more than ``MAX_PREFILL_STEPS`` steps of ``batched_tokens`` tokens (None: it is not)."""
    steps = cdiv(max(tokens - 1, 0), max(batched_tokens, 1))
    if steps <= MAX_PREFILL_STEPS:
        return None
    return (
        f"a request of {tokens:,} tokens takes {steps:,} scheduler steps of max_num_batched_tokens "
        f"{batched_tokens:,}; the admission model walks through at most {MAX_PREFILL_STEPS:,} per request "
        "(lower max_model_len, or raise max_num_batched_tokens)"
    )


def check_prefill_steps(tokens: int, batched_tokens: int) -> None:
    """PrefillTooLong when ``prefill_steps_reason`` gives one."""
    why = prefill_steps_reason(tokens, batched_tokens)
    if why:
        raise PrefillTooLong(why)


# Requests sent together that the together model steps (together.py), and the scheduler steps it
# walks through for one such run: a run of N requests takes about N x prompt / max_num_batched_tokens
# steps to admit them all, then the output's decode steps.
MAX_SENT = 4_096
MAX_TOGETHER_STEPS = 1_000_000


class TooMuchToStep(BadInput):
    """A run of requests sent together is beyond what the together model steps through."""


def together_reason(prompt: int, output: int, batched_tokens: int, sent: int) -> str | None:
    """Why ``sent`` requests of ``prompt`` and ``output`` tokens are beyond the together model (None: they
    are not)."""
    if sent > MAX_SENT:
        return f"{sent:,} requests sent together: the model steps at most {MAX_SENT:,}"
    steps = sent * cdiv(max(prompt, 1), max(batched_tokens, 1)) * 2 + output
    if steps > MAX_TOGETHER_STEPS:
        return (
            f"{sent:,} requests of {prompt:,} prompt and {output:,} output tokens take about {steps:,} scheduler "
            f"steps of max_num_batched_tokens {batched_tokens:,}; the model steps through at most "
            f"{MAX_TOGETHER_STEPS:,} (shorten the output, or raise max_num_batched_tokens)"
        )
    return None


def check_together(prompt: int, output: int, batched_tokens: int, sent: int) -> None:
    """TooMuchToStep when ``together_reason`` gives one."""
    why = together_reason(prompt, output, batched_tokens, sent)
    if why:
        raise TooMuchToStep(why)
