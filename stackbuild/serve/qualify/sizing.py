"""What qualify sends, sized to the server's ``max_model_len`` (its /v1/models entry), so that no request is
one the server must refuse: vLLM refuses a prompt of max_model_len tokens or more, and a request whose prompt
plus max_tokens is above it (older releases; newer ones cut max_tokens, which would shorten a fixed-length run).

The throughput runs: a prompt that cannot hold one output token is skipped, and every run asks for --max-tokens,
or fewer when the longest prompt kept plus --max-tokens is above max_model_len. The prefix-cache probe: k x the
hit alignment shared, plus PROBE_TAIL_TOKENS of its own, plus PROBE_OUTPUT_TOKENS out; fewer blocks than
--prefix-blocks when those do not fit, skipped when one block does not. Each change is one notice line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from stackbuild.core.errors import QualifyFailed
from stackbuild.serve.qualify.result import ProbeSizing

# The prefix-cache probe: each prompt's own tokens after the shared prefix, and its output tokens.
PROBE_TAIL_TOKENS = 4
PROBE_OUTPUT_TOKENS = 4


@dataclass(frozen=True)
class PromptLength:
    """One chat prompt and its tokens as the server's chat template renders it (/tokenize)."""

    prompt_class: str  # "readiness" for the readiness check's prompt
    prompt: str
    tokens: int


@dataclass(frozen=True)
class Runs:
    """The generations sized: the prompts kept per class (in the prompt set's order), every run's output
    tokens, the readiness check's output tokens, the prompts skipped and one notice per change."""

    prompts: tuple[tuple[str, tuple[str, ...]], ...]
    run_tokens: int
    readiness_tokens: int
    skipped: tuple[str, ...]
    notices: tuple[str, ...]


@dataclass(frozen=True)
class ProbeFit:
    sizing: ProbeSizing
    blocks: int
    note: Optional[str]


def size_runs(
    readiness: PromptLength,
    lengths: Sequence[PromptLength],
    asked_tokens: int,
    readiness_tokens: int,
    max_model_len: Optional[int],
    where: str,
) -> Runs:
    """The runs that fit ``max_model_len`` (None: all as asked). QualifyFailed when the readiness prompt or
    every prompt of the set leaves no output token (nothing could be measured)."""
    classes: dict[str, list[str]] = {}
    if max_model_len is None:
        for p in lengths:
            classes.setdefault(p.prompt_class, []).append(p.prompt)
        return Runs(_grouped(classes), asked_tokens, readiness_tokens, (), ())
    kept = [p for p in lengths if p.tokens < max_model_len]
    too_long = [p for p in lengths if p.tokens >= max_model_len]
    if readiness.tokens >= max_model_len:
        raise QualifyFailed(
            f"{where}: the server's max_model_len {max_model_len:,} cannot hold the readiness check's prompt "
            f"({readiness.tokens:,} tokens) and one output token"
        )
    if not kept:
        raise QualifyFailed(
            f"{where}: the server's max_model_len {max_model_len:,} holds none of qualify's prompts with one "
            f"output token (the shortest is {min(p.tokens for p in lengths):,} tokens)"
        )
    notices, skipped = [], []
    for p in too_long:
        label = f"{p.prompt_class}: {_words(p.prompt)} ({p.tokens:,} tokens)"
        skipped.append(label)
        notices.append(
            f"{p.prompt_class} prompt {_words(p.prompt)!r} skipped: its {p.tokens:,} tokens leave no output token "
            f"under the server's max_model_len {max_model_len:,}"
        )
    for p in kept:
        classes.setdefault(p.prompt_class, []).append(p.prompt)
    longest = max(p.tokens for p in kept)
    run_tokens = min(asked_tokens, max_model_len - longest)
    if run_tokens < asked_tokens:
        notices.append(
            f"--max-tokens {asked_tokens}: runs ask for {run_tokens} output tokens, as the longest prompt "
            f"({longest:,} tokens) plus {asked_tokens} is above the server's max_model_len {max_model_len:,}"
        )
    ready_tokens = min(readiness_tokens, max_model_len - readiness.tokens)
    return Runs(_grouped(classes), run_tokens, ready_tokens, tuple(skipped), tuple(notices))


def size_probe(asked_blocks: int, alignment: int, max_model_len: Optional[int]) -> ProbeFit:
    """How many blocks of ``alignment`` tokens the probe shares so that each of its requests fits."""
    if max_model_len is None:
        return ProbeFit(ProbeSizing.AS_ASKED, asked_blocks, None)
    extra = PROBE_TAIL_TOKENS + PROBE_OUTPUT_TOKENS
    fit = max(0, (max_model_len - extra) // alignment)
    if fit >= asked_blocks:
        return ProbeFit(ProbeSizing.AS_ASKED, asked_blocks, None)
    asked = asked_blocks * alignment + extra
    if fit >= 1:
        return ProbeFit(
            ProbeSizing.SIZED,
            fit,
            f"prefix-cache probe sized to {fit} x {alignment} shared tokens, not --prefix-blocks {asked_blocks}: "
            f"{asked:,} tokens (prefix, {PROBE_TAIL_TOKENS} of its own, {PROBE_OUTPUT_TOKENS} out) is above the "
            f"server's max_model_len {max_model_len:,}",
        )
    return ProbeFit(
        ProbeSizing.SKIPPED,
        0,
        f"prefix-cache probe skipped: one hit alignment unit ({alignment:,} tokens) plus {PROBE_TAIL_TOKENS} of "
        f"its own and {PROBE_OUTPUT_TOKENS} out is above the server's max_model_len {max_model_len:,}",
    )


def _grouped(classes: dict[str, list[str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((name, tuple(prompts)) for name, prompts in classes.items())


def _words(prompt: str, count: int = 5) -> str:
    words = prompt.split()
    return " ".join(words[:count]) + (" ..." if len(words) > count else "")
