"""Requests at once: how many requests of a given length the KV pool holds
(stdlib only).

The modelled vLLM release draws every KV-cache group's blocks from one shared pool
(``BlockPool``), which keeps one block back as the null block that stands in
for freed and skipped slots. Requests of ``tokens`` tokens are admitted one
after another the way vLLM's scheduler admits and prefills them, each keeping
the blocks its prefill leaves it (admission.py: the chunks, the lookahead
slots, the blocks freed behind a sliding window and behind a mamba state,
the full-sequence admission check); the count is how many are admitted when
the next is refused (tests/support/oracle_concurrency.py counts them with vLLM's
own scheduler: tests/agreement/test_concurrency_agreement.py).

vLLM logs ``num_blocks / blocks per request`` at start
(``get_max_concurrency_for_kv_cache_config``, "Maximum concurrency for N
tokens per request"), the blocks per request being what each group's spec
says one request of max_model_len holds (``max_memory_usage_bytes`` / page:
report.RequestBlocks); the figure differs from the count where the manager
holds other blocks than the spec says (a mamba state in "align" mode with
async scheduling keeps one more state block, the one a step in flight reads;
a sliding window holds the blocks the actual chunks keep in flight, not the
full ``max_in_flight_tokens``).

Tokens in flight (the sliding-window groups keep the blocks of tokens
scheduled but not yet freed, ``VllmConfig.max_in_flight_tokens``): two
batches (async scheduling, on by default on a GPU) of the gate input's
``max_num_batched_tokens``: the recipe's flag, else what ``vllm serve`` picks for
the GPU (``EngineArgs.get_batch_defaults``: 16,384 on GPUs of at least 160 GiB,
8,192 from 70 GiB, 2,048 below and on GB10; stackbuild/core/gpus.py), else
``SchedulerConfig``'s 2,048.

``max_num_seqs``: vLLM refuses to start when it exceeds the pool's
blocks with full CUDA graphs (the default ``FULL_AND_PIECEWISE``) and mamba
layers: ``CompilationConfig.resolve_cudagraph_mode_and_sizes``
(vllm/config/compilation.py, "max_num_seqs (...) exceeds available Mamba cache
blocks (...)"), raised after the weights load, when the model runner sets up
CUDA graphs.  The gate refuses that before.  A ``max_num_seqs`` above the
requests that fit at a listed length starts, but the scheduler holds the
rest waiting (or preempts): a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from geometry.image_contract import Behaviour
from geometry.model.inputs import GeometryInputs
from geometry.plan.admission import Prefill, prefill
from geometry.plan.at_once import at_once
from geometry.plan.capacity import kv_token_capacity
from geometry.plan.limits import PrefillTooLong, TooMuchToStep
from geometry.plan.report import GeometryReport, Plan
from geometry.plan.scheduler_settings import (  # noqa: F401 (the names callers import from here)
    NULL_BLOCKS,
    batched_tokens,
    cache_block_size,
    concurrent_batches,
    in_flight_tokens,
    max_model_len_of,
    plan_speculation,
    scheduling,
)
from geometry.plan.together_state import Workload, workload

# Lengths shown when none are named: the default recipe's 1M, and 128K and 32K.
DEFAULT_CONTEXTS = (32_768, 131_072, 1_048_576)
PLAN_LABELS = ("with_drafter", "target_only_same_spec", "without_drafter")


def vllm_kv_cache_size_tokens(plan: Plan, max_model_len: int, in_flight: int) -> int | None:
    """What vLLM logs as "<device> KV cache size: N tokens" (``get_kv_cache_capacity``, the same in
    every modelled release): ``int(max concurrency x max_model_len)``, the max concurrency being
    ``num_blocks / blocks one request of max_model_len holds`` summed over the groups
    (``get_max_concurrency_for_kv_cache_config``). None when vLLM cannot plan."""
    per = blocks_per_request(plan, max_model_len, in_flight)
    if per is None:
        return None
    return int(plan.num_blocks / sum(per) * max_model_len)


def blocks_per_request(plan: Plan, tokens: int, in_flight: int) -> tuple[int, ...] | None:
    """Per group, the blocks the group's spec says one request of ``tokens`` tokens holds
    (``max_memory_usage_bytes`` / page; None when vLLM cannot plan or the rows carry no rule)."""
    if not _plans(plan):
        return None
    return tuple(g.per_request.blocks(tokens, in_flight) for g in plan.groups)


def _plans(plan: Plan) -> bool:
    return not (plan.error or plan.num_blocks is None or not plan.groups) and all(
        g.per_request is not None for g in plan.groups
    )


def request_prefill(
    plan: Plan, inputs: GeometryInputs, label: str, tokens: int, behaviour: Behaviour | None = None
) -> Prefill | None:
    """What one request of ``tokens`` tokens holds through its prefill in ``plan``, as ``behaviour``
    runs it (None: the inputs'; None when vLLM cannot plan)."""
    if not _plans(plan) or plan.prefix_cache is None:
        return None
    speculating, num_spec = plan_speculation(inputs)[label]
    s = scheduling(plan, inputs, speculating, num_spec, behaviour or inputs.vllm_behaviour)
    return prefill(tuple(g.per_request for g in plan.groups), tokens, s, free_blocks(plan))


def free_blocks(plan: Plan) -> int:
    """The blocks a request can draw: the pool less the null block."""
    return max((plan.num_blocks or 0) - NULL_BLOCKS, 0)


def admitted_requests(
    plan: Plan, inputs: GeometryInputs, label: str, tokens: int, behaviour: Behaviour | None = None
) -> int | None:
    """Requests of ``tokens`` tokens the pool admits one after another before it refuses one (None: vLLM
    cannot plan, or the prefill is longer than the model walks through)."""
    try:
        p = request_prefill(plan, inputs, label, tokens, behaviour)
    except PrefillTooLong:
        return None
    return None if p is None else p.requests(free_blocks(plan))


@dataclass(frozen=True)
class Fit:
    """One plan at one length."""

    tokens: int
    admitted: int | None  # admitted one after another, each keeping its prefill's blocks, before one is refused
    blocks_per_request: int | None  # what each holds after its prefill
    attention_blocks: int | None  # of those, the groups that keep every token
    vllm_max_concurrency: float | None  # what vLLM logs: num_blocks / the specs' blocks per request
    vllm_blocks_per_request: int | None = None  # the specs' blocks per request (max_memory_usage_bytes)
    peak_blocks: int | None = None  # the most one request holds during its prefill
    need_blocks: int | None = None  # the most free blocks it needs at once (admission, a chunk and its copies)
    admission_blocks: int | None = None  # what the scheduler's full-sequence admission check asks
    prefill_chunks: int | None = None  # the steps its prefill takes
    group_blocks: tuple[int, ...] | None = None  # per group, what each holds after its prefill
    # Requests at once (together.py's DEFINITION) of ``work`` (the length split by together_state.workload), for
    # the with-drafter plan (None for the others, or when vLLM cannot plan), and what stops one more (or why
    # the count is not stepped).
    work: Workload | None = None
    requests: int | None = None
    stopped_by: str | None = None


@dataclass(frozen=True)
class Headroom:
    """How close a plan's token capacity comes to the KV memory."""

    attention_bytes_per_token: int  # summed over the layers that keep every token
    ideal_tokens: int  # KV memory / bytes per token
    capacity_tokens: int
    share: float  # capacity / ideal
    block_padding_bytes: int  # whole blocks' bytes that hold no kept token's KV
    below_one_block_bytes: int  # KV memory left over below one block
    kv_memory_bytes: int
    layers: tuple[tuple[str, int, int], ...]  # (role, layers, bytes per token)


@dataclass(frozen=True)
class Concurrency:
    contexts: tuple[int, ...]
    max_model_len: int
    in_flight_tokens: int
    fits: dict  # plan label -> tuple[Fit, ...] (one per context)
    headroom: Headroom | None  # of the with-drafter plan
    max_num_seqs: int | None
    refusals: tuple[str, ...]
    warnings: tuple[str, ...]
    # plan label -> what vLLM logs as its KV cache size in tokens (vllm_kv_cache_size_tokens)
    vllm_kv_cache_size_tokens: dict | None = None
    batched_tokens: int | None = None  # a scheduler step's token budget


def _fit(plan: Plan, inputs: GeometryInputs, behaviour: str, label: str, tokens: int, in_flight: int) -> Fit:
    try:
        p = request_prefill(plan, inputs, label, tokens, behaviour)
    except PrefillTooLong:  # the gate refuses it (serving_limits.py)
        p = None
    if p is None:
        return Fit(tokens, None, None, None, None)
    sizing = sum(blocks_per_request(plan, tokens, in_flight))
    logged = round(plan.num_blocks / sizing, 2)
    if not p.chunks:  # refused at admission: the pool is smaller than one request asks
        return Fit(
            tokens, 0, None, None, logged, sizing, admission_blocks=p.admission_blocks, need_blocks=p.need_blocks
        )
    attention = sum(n for n, g in zip(p.held, plan.groups) if g.kind.keeps_every_token)
    return Fit(
        tokens,
        p.requests(free_blocks(plan)),
        p.blocks,
        attention,
        logged,
        sizing,
        p.peak_blocks,
        p.need_blocks,
        p.admission_blocks,
        len(p.chunks),
        p.held,
    )


def _together(report: GeometryReport, inputs: GeometryInputs, fit: Fit) -> Fit:
    """``fit`` of the with-drafter plan with its requests at once (together.py), the search for the count
    starting at the admission count."""
    work = workload(fit.tokens)
    try:
        got = at_once(
            report.with_drafter, inputs, "with_drafter", work, report.behaviour, start=fit.admitted or 1, alone=False
        )
    except TooMuchToStep as exc:
        return replace(fit, work=work, stopped_by=str(exc))
    if got.requests is None:
        return replace(fit, work=work)
    return replace(fit, work=work, requests=got.requests, stopped_by=got.stopped_by)


def headroom(plan: Plan, kv_memory: int) -> Headroom | None:
    capacity = kv_token_capacity(plan)
    kept = [r for r in plan.layers if r.kind.keeps_every_token]
    bpt = sum(r.bytes_per_token for r in kept)
    if capacity is None or not bpt or not kv_memory:
        return None
    by_role: dict[str, list[int]] = {}
    for r in kept:
        by_role.setdefault(r.role, []).append(r.bytes_per_token)
    layers = tuple((role, len(v), v[0]) for role, v in by_role.items())
    used = plan.num_blocks * plan.bytes_per_block
    return Headroom(
        bpt,
        kv_memory // bpt,
        capacity,
        capacity * bpt / kv_memory,
        used - capacity * bpt,
        kv_memory - used,
        kv_memory,
        layers,
    )


def max_num_seqs_refusals(report: GeometryReport, max_num_seqs: int | None) -> tuple[str, ...]:
    """What vLLM refuses at start (see the module docstring), per plan it would serve."""
    plan = report.with_drafter
    if max_num_seqs is None or plan.error or plan.num_blocks is None:
        return ()
    if any(g.kind.holds_state for g in plan.groups) and max_num_seqs > plan.num_blocks:
        return (
            f"max_num_seqs {max_num_seqs:,} exceeds the {plan.num_blocks:,} blocks of the KV "
            f"pool: vLLM refuses to start with CUDA graphs (each decode sequence needs "
            f"a Mamba cache block; CompilationConfig.resolve_cudagraph_mode_and_sizes)",
        )
    return ()


def _warnings(max_num_seqs: int | None, max_model_len: int, fits: Sequence[Fit]) -> tuple[str, ...]:
    if max_num_seqs is None:
        return ()
    shortest = min((f for f in fits), key=lambda f: f.tokens, default=None)
    out = []
    for f, what in (
        (next((f for f in fits if f.tokens == max_model_len), None), "max_model_len"),
        (shortest, "the shortest listed context"),
    ):
        if f is None or f.requests is None or max_num_seqs <= f.requests:  # the together count
            continue
        line = (
            f"max_num_seqs {max_num_seqs:,} is above the {f.requests:,} requests of "
            f"{f.tokens:,} tokens ({what}) that fit at once: the rest wait or are preempted"
        )
        if line not in out:
            out.append(line)
        if f is shortest:
            break
    return tuple(out)


class ContextTooLong(ValueError):
    """A named context is longer than max_model_len (vLLM refuses such a request)."""


def contexts_for(max_model_len: int, named: Iterable[int] | None = None) -> tuple[int, ...]:
    """The lengths to show: those named (or the defaults up to max_model_len), and
    max_model_len itself, longest first."""
    chosen = set(named) if named is not None else {c for c in DEFAULT_CONTEXTS if c <= max_model_len}
    for c in sorted(chosen):
        if type(c) is not int or c < 1:
            raise ContextTooLong(f"context {c!r} must be a positive number of tokens")
        if c < 2:
            raise ContextTooLong(
                f"context {c:,} is below 2 tokens (a request holds a prompt token and the token it generates)"
            )
        if c > max_model_len:
            raise ContextTooLong(
                f"context {c:,} is above max_model_len {max_model_len:,} (vLLM refuses a longer request)"
            )
    chosen.add(max_model_len)
    return tuple(sorted(chosen, reverse=True))


def concurrency(report: GeometryReport, inputs: GeometryInputs, contexts: Iterable[int] | None = None) -> Concurrency:
    """Requests at once for every plan of ``report`` at each length (ContextTooLong
    for a named context above max_model_len)."""
    max_model_len = max_model_len_of(inputs)
    max_num_seqs = inputs.max_num_seqs
    lengths = contexts_for(max_model_len, contexts)
    in_flight = in_flight_tokens(inputs)
    fits = {
        label: tuple(_fit(getattr(report, label), inputs, report.behaviour, label, n, in_flight) for n in lengths)
        for label in PLAN_LABELS
    }
    within = fits["with_drafter"] = tuple(_together(report, inputs, f) for f in fits["with_drafter"])
    return Concurrency(
        contexts=lengths,
        max_model_len=max_model_len,
        in_flight_tokens=in_flight,
        fits=fits,
        headroom=headroom(report.with_drafter, report.kv_cache_memory_bytes),
        max_num_seqs=max_num_seqs,
        refusals=max_num_seqs_refusals(report, max_num_seqs),
        warnings=_warnings(max_num_seqs, max_model_len, within),
        vllm_kv_cache_size_tokens={
            label: vllm_kv_cache_size_tokens(getattr(report, label), max_model_len, in_flight) for label in PLAN_LABELS
        },
        batched_tokens=batched_tokens(inputs),
    )
