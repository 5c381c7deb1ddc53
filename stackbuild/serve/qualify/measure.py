"""One server's figures: readiness, decode throughput per prompt class, the spec-decode and prefix-cache deltas."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Optional

from stackbuild.serve.qualify import metrics
from stackbuild.serve.qualify.client import Server, Streamed, wait_until
from stackbuild.serve.qualify.prompts import PREFIX_WORDS, PROMPTS
from stackbuild.serve.qualify.result import (
    ClassThroughput,
    Latency,
    PrefixCacheProbe,
    ProbeSizing,
    SpecDecode,
    Throughput,
)
from stackbuild.serve.qualify.sanity import OutputCheck, check
from stackbuild.serve.qualify.sizing import PROBE_OUTPUT_TOKENS, PROBE_TAIL_TOKENS, ProbeFit, PromptLength, Runs

# The readiness check's prompt and output length.
READINESS_PROMPT = "Say hello."
READINESS_TOKENS = 4
# The prefix-cache probe tokenizes its random words this many at a time.
PROBE_WORDS_PER_TOKENIZE = 64


@dataclass(frozen=True)
class Settings:
    max_tokens: int = 256  # every run's output length (max_tokens = min_tokens, ignore_eos)
    warmup: int = 1
    runs: int = 3
    ready_timeout_s: float = 300.0
    prefix_blocks: int = 2  # k: the shared prefix is k x the hit alignment


def snapshot(server: Server) -> metrics.Snapshot:
    return metrics.parse(server.metrics_text(), f"{server.role} {server.url}/metrics")


def prompt_lengths(server: Server, model: str) -> tuple[PromptLength, tuple[PromptLength, ...]]:
    """The readiness prompt's and every prompt of the set's tokens, the server's chat template applied."""
    readiness = PromptLength("readiness", READINESS_PROMPT, server.chat_prompt_tokens(model, READINESS_PROMPT))
    return readiness, tuple(
        PromptLength(name, p, server.chat_prompt_tokens(model, p)) for name, prompts in PROMPTS.items() for p in prompts
    )


def ready(server: Server, model: str, settings: Settings, runs: Runs) -> float:
    """Seconds until a streamed generation's usage counts a token (retried until the readiness timeout). Tokens,
    not text: dummy weights can generate tokens that detokenize to nothing, from a server that is ready."""
    start = time.monotonic()
    deadline = start + settings.ready_timeout_s
    wait_until(deadline, lambda: server.stream_chat(model, READINESS_PROMPT, runs.readiness_tokens, retry=True))
    return time.monotonic() - start


def warm_up(server: Server, model: str, settings: Settings, runs: Runs) -> None:
    for prompt in (p for _, prompts in runs.prompts for p in prompts):
        for _ in range(settings.warmup):
            server.chat(model, prompt, runs.run_tokens)


def latency(samples_s: list[float]) -> Latency:
    """Mean, median and p99 in milliseconds, as vLLM's benchmark computes them (numpy)."""
    import numpy as np

    if not samples_s:
        return Latency(samples=0, mean_ms=None, median_ms=None, p99_ms=None)
    ms = np.array(samples_s) * 1000
    return Latency(
        samples=len(samples_s),
        mean_ms=round(float(np.mean(ms)), 3),
        median_ms=round(float(np.median(ms)), 3),
        p99_ms=round(float(np.percentile(ms, 99)), 3),
    )


@dataclass
class _Streams:
    ttft: list = field(default_factory=list)
    tpot: list = field(default_factory=list)
    itl: list = field(default_factory=list)

    def add(self, s: Streamed) -> None:
        if s.ttft_s is not None:
            self.ttft.append(s.ttft_s)
        if s.tpot_s is not None:
            self.tpot.append(s.tpot_s)
        self.itl.extend(s.itl_s)


def throughput(
    server: Server,
    model: str,
    settings: Settings,
    runs: Runs,
    readiness_s: float,
    configured: bool,
    outputs: list[OutputCheck],
) -> Throughput:
    """Per prompt class, ``runs`` non-streamed generations of every prompt kept (end-to-end output tok/s) and
    ``runs`` streamed ones (TTFT, TPOT, ITL), after warm_up; every count is the server's usage."""
    classes, everything = [], _Streams()
    for name, prompts in runs.prompts:
        tokens, seconds, streams = 0, 0.0, _Streams()
        for prompt in prompts:
            for _ in range(settings.runs):
                done = server.chat(model, prompt, runs.run_tokens)
                tokens += done.completion_tokens
                seconds += done.seconds
            outputs.append(check(name, done.text, done.completion_tokens))
            for _ in range(settings.runs):
                streamed = server.stream_chat(model, prompt, runs.run_tokens)
                streams.add(streamed)
                everything.add(streamed)
        classes.append(
            ClassThroughput(
                prompt_class=name,
                runs=settings.runs * len(prompts),
                output_tokens=tokens,
                seconds=round(seconds, 4),
                e2e_output_tokens_per_s=_rate(tokens, seconds),
                streamed_runs=settings.runs * len(prompts),
                ttft=latency(streams.ttft),
                tpot=latency(streams.tpot),
                itl=latency(streams.itl),
            )
        )
    all_tokens = sum(c.output_tokens for c in classes)
    all_seconds = sum(c.seconds for c in classes)
    return Throughput(
        url=server.url,
        model=model,
        readiness_s=round(readiness_s, 3),
        run_tokens=runs.run_tokens,
        classes=tuple(classes),
        e2e_output_tokens_per_s=_rate(all_tokens, all_seconds),
        ttft=latency(everything.ttft),
        tpot=latency(everything.tpot),
        itl=latency(everything.itl),
        speculation_configured=configured,
    )


def spec_decode(before: metrics.Snapshot, after: metrics.Snapshot, configured: bool) -> SpecDecode:
    drafts = metrics.delta(before, after, metrics.DRAFTS)
    draft_tokens = metrics.delta(before, after, metrics.DRAFT_TOKENS)
    accepted = metrics.delta(before, after, metrics.ACCEPTED)
    per_pos = tuple(metrics.delta(before, after, metrics.ACCEPTED_PER_POS, p) for p in after.positions())
    return SpecDecode(
        configured=configured,
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted=accepted,
        acceptance_rate=round(accepted / draft_tokens, 4) if draft_tokens else None,
        mean_accepted_length=round(1 + accepted / drafts, 4) if drafts else None,
        accepted_per_position=per_pos,
        acceptance_per_position=tuple(round(n / drafts, 4) if drafts else 0.0 for n in per_pos),
        per_position_sums_to_accepted=sum(per_pos) == accepted,
    )


def prefix_probe(
    server: Server,
    model: str,
    settings: Settings,
    alignment: Optional[int],
    source: str,
    enabled: bool,
    fit: Optional[ProbeFit],
) -> PrefixCacheProbe:
    """Two completions whose prompts (token ids) share k x alignment tokens (k as ``fit`` sized it) and differ
    after; the second's hits should be the whole shared prefix (hits count whole alignment units, never the
    prompt's last token)."""
    probed = enabled and bool(alignment) and fit is not None and fit.blocks > 0
    if not probed:
        return PrefixCacheProbe(
            enabled=enabled,
            hit_alignment_tokens=alignment,
            alignment_source=source,
            sizing=fit.sizing if enabled and alignment and fit is not None else ProbeSizing.NOT_PROBED,
            asked_blocks=settings.prefix_blocks,
            blocks=0,
            sizing_note=fit.note if fit is not None else None,
            shared_prefix_tokens=0,
            predicted_hit_tokens=0,
            first_hit_tokens=0,
            second_hit_tokens=0,
            second_query_tokens=0,
        )
    shared = fit.blocks * alignment
    tail = PROBE_TAIL_TOKENS
    rng = random.Random(time.time_ns())  # a prefix no earlier request shares
    ids: list[int] = []
    while len(ids) < shared + 2 * tail:  # short texts: none longer than the server's max_model_len
        words = " ".join(rng.choice(PREFIX_WORDS) for _ in range(min(shared, PROBE_WORDS_PER_TOKENIZE)))
        ids += server.tokenize(model, words)
    prefix = ids[:shared]
    tails = (ids[shared : shared + tail], ids[shared + tail : shared + 2 * tail])
    hits = []
    queries = 0
    for own in tails:
        before = snapshot(server)
        server.complete_ids(model, prefix + own, PROBE_OUTPUT_TOKENS)
        after = snapshot(server)
        hits.append(metrics.delta(before, after, metrics.PREFIX_HITS))
        queries = metrics.delta(before, after, metrics.PREFIX_QUERIES)
    return PrefixCacheProbe(
        enabled=True,
        hit_alignment_tokens=alignment,
        alignment_source=source,
        sizing=fit.sizing,
        asked_blocks=settings.prefix_blocks,
        blocks=fit.blocks,
        sizing_note=fit.note,
        shared_prefix_tokens=shared,
        predicted_hit_tokens=shared,
        first_hit_tokens=hits[0],
        second_hit_tokens=hits[1],
        second_query_tokens=queries,
    )


def _rate(tokens: int, seconds: float) -> float:
    return round(tokens / seconds, 2) if seconds > 0 else 0.0
