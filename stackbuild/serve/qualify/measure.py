"""One server's figures: readiness, decode throughput per prompt class, the spec-decode and prefix-cache deltas."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Optional

from stackbuild.serve.qualify import metrics
from stackbuild.serve.qualify.client import Server, wait_until
from stackbuild.serve.qualify.prompts import PREFIX_WORDS, PROMPTS
from stackbuild.serve.qualify.result import ClassThroughput, PrefixCacheProbe, SpecDecode, Throughput
from stackbuild.serve.qualify.sanity import OutputCheck, check


@dataclass(frozen=True)
class Settings:
    max_tokens: int = 256
    warmup: int = 1
    runs: int = 3
    ready_timeout_s: float = 300.0
    prefix_blocks: int = 2  # k: the shared prefix is k x the hit alignment


def snapshot(server: Server) -> metrics.Snapshot:
    return metrics.parse(server.metrics_text(), f"{server.role} {server.url}/metrics")


def ready(server: Server, model: str, settings: Settings) -> float:
    """Seconds until a streamed generation's first token (retried until the readiness timeout)."""
    start = time.monotonic()
    deadline = start + settings.ready_timeout_s
    wait_until(deadline, lambda: server.stream_chat(model, "Say hello.", 4, retry=True))
    return time.monotonic() - start


def warm_up(server: Server, model: str, settings: Settings) -> None:
    for prompt in (p for prompts in PROMPTS.values() for p in prompts):
        for _ in range(settings.warmup):
            server.chat(model, prompt, settings.max_tokens)


def throughput(
    server: Server, model: str, settings: Settings, readiness_s: float, configured: bool, outputs: list[OutputCheck]
) -> Throughput:
    """``runs`` non-streamed generations of every prompt per class (after warm_up); one streamed run for TTFT."""
    classes = []
    for name, prompts in PROMPTS.items():
        tokens, seconds = 0, 0.0
        for prompt in prompts:
            for _ in range(settings.runs):
                done = server.chat(model, prompt, settings.max_tokens)
                tokens += done.completion_tokens
                seconds += done.seconds
            outputs.append(check(name, done.text))
        streamed = server.stream_chat(model, prompts[0], settings.max_tokens)
        classes.append(
            ClassThroughput(
                prompt_class=name,
                runs=settings.runs * len(prompts),
                output_tokens=tokens,
                seconds=round(seconds, 4),
                tokens_per_s=_rate(tokens, seconds),
                ttft_s=round(streamed.ttft_s, 4),
            )
        )
    all_tokens = sum(c.output_tokens for c in classes)
    all_seconds = sum(c.seconds for c in classes)
    return Throughput(
        url=server.url,
        model=model,
        readiness_s=round(readiness_s, 3),
        classes=tuple(classes),
        tokens_per_s=_rate(all_tokens, all_seconds),
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
