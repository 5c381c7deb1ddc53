"""One server's figures: readiness, decode throughput per prompt class, the spec-decode and prefix-cache deltas."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Optional

from stackbuild.serve.qualify import metrics
from stackbuild.serve.qualify.client import Server, Streamed, wait_until
from stackbuild.serve.qualify.prompts import PREFIX_WORDS, PROMPTS
from stackbuild.serve.qualify.result import ClassThroughput, Latency, PrefixCacheProbe, SpecDecode, Throughput
from stackbuild.serve.qualify.sanity import OutputCheck, check

# The readiness check's output length.
READINESS_TOKENS = 4


@dataclass(frozen=True)
class Settings:
    max_tokens: int = 256  # every run's output length (max_tokens = min_tokens, ignore_eos)
    warmup: int = 1
    runs: int = 3
    ready_timeout_s: float = 300.0
    prefix_blocks: int = 2  # k: the shared prefix is k x the hit alignment


def snapshot(server: Server) -> metrics.Snapshot:
    return metrics.parse(server.metrics_text(), f"{server.role} {server.url}/metrics")


def ready(server: Server, model: str, settings: Settings) -> float:
    """Seconds until a streamed generation's usage counts a token (retried until the readiness timeout). Tokens,
    not text: dummy weights can generate tokens that detokenize to nothing, from a server that is ready."""
    start = time.monotonic()
    deadline = start + settings.ready_timeout_s
    wait_until(deadline, lambda: server.stream_chat(model, "Say hello.", READINESS_TOKENS, retry=True))
    return time.monotonic() - start


def warm_up(server: Server, model: str, settings: Settings) -> None:
    for prompt in (p for prompts in PROMPTS.values() for p in prompts):
        for _ in range(settings.warmup):
            server.chat(model, prompt, settings.max_tokens)


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
    server: Server, model: str, settings: Settings, readiness_s: float, configured: bool, outputs: list[OutputCheck]
) -> Throughput:
    """Per prompt class, ``runs`` non-streamed generations of every prompt (end-to-end output tok/s) and
    ``runs`` streamed ones (TTFT, TPOT, ITL), after warm_up; every count is the server's usage."""
    classes, everything = [], _Streams()
    for name, prompts in PROMPTS.items():
        tokens, seconds, streams = 0, 0.0, _Streams()
        for prompt in prompts:
            for _ in range(settings.runs):
                done = server.chat(model, prompt, settings.max_tokens)
                tokens += done.completion_tokens
                seconds += done.seconds
            outputs.append(check(name, done.text, done.completion_tokens))
            for _ in range(settings.runs):
                streamed = server.stream_chat(model, prompt, settings.max_tokens)
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
        run_tokens=settings.max_tokens,
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
    server: Server, model: str, settings: Settings, alignment: Optional[int], source: str, enabled: bool
) -> PrefixCacheProbe:
    """Two completions whose prompts (token ids) share k x alignment tokens and differ after; the second's
    hits should be the whole shared prefix (hits count whole alignment units, never the prompt's last token)."""
    if not enabled or not alignment:
        return PrefixCacheProbe(
            enabled=enabled,
            hit_alignment_tokens=alignment,
            alignment_source=source,
            shared_prefix_tokens=0,
            predicted_hit_tokens=0,
            first_hit_tokens=0,
            second_hit_tokens=0,
            second_query_tokens=0,
        )
    shared = settings.prefix_blocks * alignment
    rng = random.Random(time.time_ns())  # a prefix no earlier request shares
    ids: list[int] = []
    while len(ids) < shared + 8:
        words = " ".join(rng.choice(PREFIX_WORDS) for _ in range(shared))
        ids += server.tokenize(model, words)
    prefix = ids[:shared]
    tails = (ids[shared : shared + 4], ids[shared + 4 : shared + 8])
    hits = []
    queries = 0
    for tail in tails:
        before = snapshot(server)
        server.complete_ids(model, prefix + tail, 4)
        after = snapshot(server)
        hits.append(metrics.delta(before, after, metrics.PREFIX_HITS))
        queries = metrics.delta(before, after, metrics.PREFIX_QUERIES)
    return PrefixCacheProbe(
        enabled=True,
        hit_alignment_tokens=alignment,
        alignment_source=source,
        shared_prefix_tokens=shared,
        predicted_hit_tokens=shared,
        first_hit_tokens=hits[0],
        second_hit_tokens=hits[1],
        second_query_tokens=queries,
    )


def _rate(tokens: int, seconds: float) -> float:
    return round(tokens / seconds, 2) if seconds > 0 else 0.0
