"""What qualify sends, sized to the server's max_model_len: every request one vLLM accepts (a prompt below
max_model_len, prompt + max_tokens at most max_model_len: vllm/v1/engine/input_processor.py and the OpenAI
server's get_max_tokens), as much as --max-tokens and --prefix-blocks ask for as fits, one notice per change."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stackbuild.core.errors import QualifyFailed
from stackbuild.serve.qualify.result import ProbeSizing
from stackbuild.serve.qualify.sizing import PROBE_OUTPUT_TOKENS, PROBE_TAIL_TOKENS, PromptLength, size_probe, size_runs

READY = PromptLength("readiness", "Say hello.", 11)


def prompts(*tokens: int) -> tuple[PromptLength, ...]:
    return tuple(
        PromptLength("prose" if i % 2 == 0 else "code", f"prompt number {i} of the set", n)
        for i, n in enumerate(tokens)
    )


def accepted_by_vllm(prompt: int, max_tokens: int, max_model_len: int) -> bool:
    """vLLM's rule, written out: the prompt below max_model_len and prompt + max_tokens within it."""
    return prompt < max_model_len and max_tokens >= 1 and prompt + max_tokens <= max_model_len


@given(
    lengths=st.lists(st.integers(1, 5000), min_size=1, max_size=6),
    asked=st.integers(1, 1 << 16),
    max_model_len=st.integers(12, 8192),
)
@settings(max_examples=300, deadline=None)
def test_every_run_sent_is_one_vllm_accepts_and_as_long_as_fits(lengths, asked, max_model_len):
    sent = prompts(*lengths)
    if all(n >= max_model_len for n in lengths):
        with pytest.raises(QualifyFailed) as failed:
            size_runs(READY, sent, asked, 4, max_model_len, "qualify URL")
        assert f"max_model_len {max_model_len:,}" in str(failed.value) and "\n" not in str(failed.value)
        return
    runs = size_runs(READY, sent, asked, 4, max_model_len, "qualify URL")
    kept = [p for p in sent if p.tokens < max_model_len]
    assert {name: qs for name, qs in runs.prompts} == {
        name: tuple(p.prompt for p in kept if p.prompt_class == name) for name in {p.prompt_class for p in kept}
    }
    assert all(accepted_by_vllm(p.tokens, runs.run_tokens, max_model_len) for p in kept)
    assert accepted_by_vllm(READY.tokens, runs.readiness_tokens, max_model_len)
    longest = max(p.tokens for p in kept)
    # as long as fits: one more token would be refused for the longest prompt, or it is what was asked
    assert runs.run_tokens == asked or not accepted_by_vllm(longest, runs.run_tokens + 1, max_model_len)
    assert len(runs.skipped) == len(sent) - len(kept)
    assert len(runs.notices) == len(runs.skipped) + (runs.run_tokens < asked)
    assert all("\n" not in n and f"max_model_len {max_model_len:,}" in n for n in runs.notices)


def test_nothing_sized_without_a_max_model_len():
    runs = size_runs(READY, prompts(50_000, 20), 256, 4, None, "qualify URL")
    assert (runs.run_tokens, runs.readiness_tokens, runs.skipped, runs.notices) == (256, 4, (), ())
    assert runs.prompts == (("prose", ("prompt number 0 of the set",)), ("code", ("prompt number 1 of the set",)))


def test_the_runs_sized_by_hand():
    # 1,024 tokens: prompts of 30 and 1,024 (skipped: no output token fits) with --max-tokens 2,000 -> 994
    runs = size_runs(READY, prompts(30, 1024), 2000, 4, 1024, "qualify URL")
    assert runs.run_tokens == 994 and runs.skipped == ("code: prompt number 1 of the ... (1,024 tokens)",)
    assert runs.notices == (
        "code prompt 'prompt number 1 of the ...' skipped: its 1,024 tokens leave no output token under the "
        "server's max_model_len 1,024",
        "--max-tokens 2000: runs ask for 994 output tokens, as the longest prompt (30 tokens) plus 2000 is above "
        "the server's max_model_len 1,024",
    )


def test_a_server_too_short_to_measure_anything_is_one_line():
    with pytest.raises(QualifyFailed) as failed:
        size_runs(READY, prompts(5), 4, 4, 11, "qualify http://x")
    assert str(failed.value) == (
        "qualify http://x: the server's max_model_len 11 cannot hold the readiness check's prompt (11 tokens) "
        "and one output token"
    )
    with pytest.raises(QualifyFailed) as failed:
        size_runs(READY, prompts(40, 30), 4, 4, 30, "qualify http://x")
    assert str(failed.value) == (
        "qualify http://x: the server's max_model_len 30 holds none of qualify's prompts with one output token "
        "(the shortest is 30 tokens)"
    )
    assert failed.value.exit_code == 24


@given(
    asked=st.integers(1, 1024),
    alignment=st.sampled_from([16, 64, 128, 256, 1152, 2048]),
    max_model_len=st.integers(1, 300_000),
)
@settings(max_examples=300, deadline=None)
def test_the_prefix_probe_fits_the_server_or_is_skipped(asked, alignment, max_model_len):
    probe = size_probe(asked, alignment, max_model_len)
    extra = PROBE_TAIL_TOKENS + PROBE_OUTPUT_TOKENS
    if probe.sizing is ProbeSizing.SKIPPED:
        assert probe.blocks == 0 and alignment + extra > max_model_len
        assert probe.note.startswith("prefix-cache probe skipped") and f"{max_model_len:,}" in probe.note
        return
    # both requests: the shared prefix and PROBE_TAIL_TOKENS of its own, PROBE_OUTPUT_TOKENS out
    assert accepted_by_vllm(probe.blocks * alignment + PROBE_TAIL_TOKENS, PROBE_OUTPUT_TOKENS, max_model_len)
    if probe.sizing is ProbeSizing.AS_ASKED:
        assert probe.blocks == asked and probe.note is None
    else:
        assert probe.sizing is ProbeSizing.SIZED and 1 <= probe.blocks < asked
        assert (probe.blocks + 1) * alignment + extra > max_model_len  # the most that fit
        assert f"--prefix-blocks {asked}" in probe.note and "\n" not in probe.note


def test_the_cpu_recipes_probe_sized_by_hand():
    # max_model_len 1,024 and 128-token blocks: 7 x 128 + 4 + 4 = 904 fits, 8 x 128 + 8 = 1,032 does not
    assert size_probe(16, 128, 1024).blocks == 7
    assert size_probe(2, 128, 1024).sizing is ProbeSizing.AS_ASKED
    assert size_probe(2, 128, 135).sizing is ProbeSizing.SKIPPED  # 128 + 8 = 136
    assert size_probe(2, 128, 136).blocks == 1
    assert size_probe(1024, 128, None).blocks == 1024
