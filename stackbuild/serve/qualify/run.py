"""The whole qualification of one deployment (and its baseline), and its verdict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from stackbuild.core.errors import BelowExpectation, QualifyFailed, QualifyResultInvalid, ServedKvCacheDiffers
from stackbuild.serve.qualify import allocation, measure, sizing
from stackbuild.serve.qualify.client import Server
from stackbuild.serve.qualify.result import (
    SCHEMA,
    Expectation,
    PrefixCacheProbe,
    Qualification,
    Sizing,
    SpecDecode,
    Throughput,
)
from stackbuild.serve.qualify.sanity import OutputCheck
from stackbuild.serve.qualify.server_log import LoggedAllocation

# Acceptance below this is "speculation on but doing nothing" (peer images' silent 0 %).
NEAR_ZERO_ACCEPTANCE = 0.05


@dataclass(frozen=True)
class Target:
    """What qualify is told about the deployment: the recipe's facts and the gate's prediction of its KV cache."""

    recipe: str
    predicted: allocation.Predicted
    server_log: Optional[LoggedAllocation] = None  # --server-log
    model: Optional[str] = None
    model_source: str = "--model"  # where ``model`` comes from, for the line that says it is not served
    max_model_len: Optional[int] = None  # the recipe's serving.max_model_len
    speculation: Optional[bool] = None  # None: what the server's /metrics say
    prefix_caching: Optional[bool] = None  # None: on when the server reports a block size
    hit_alignment_tokens: Optional[int] = None  # the recipe gate's prediction
    min_decode_tokens_per_s: Optional[float] = None
    min_acceptance: Optional[float] = None
    allow_degenerate: bool = False


@dataclass(frozen=True)
class BaselineResult:
    """--baseline-result: a qualify result measured earlier (of the server without speculation, say), its
    ``served`` figures the baseline."""

    path: Path
    result: Qualification


def qualify(
    server: Server,
    target: Target,
    settings: measure.Settings,
    baseline: Union[Server, BaselineResult, None] = None,
    notify=lambda line: None,
) -> Qualification:
    """The whole qualification; ``notify(line)`` is told each notice (a run or probe sized to the server) as
    it is decided, before anything is sent that it concerns."""
    card = server.served_model(target.model, source=target.model_source)
    model = card.name
    if isinstance(baseline, BaselineResult) and baseline.result.model != model:
        raise QualifyResultInvalid(
            f"--baseline-result {baseline.path}: model: {baseline.result.model!r}, but {server.url} serves {model!r}"
        )
    measure.snapshot(server)  # a server without vLLM's counters is refused before any generation
    base_card = baseline.served_model(model) if isinstance(baseline, Server) else None
    lengths = [n for n in (card.max_model_len, base_card.max_model_len if base_card else None) if n is not None]
    max_len = min(lengths) if lengths else None
    readiness_prompt, prompts = measure.prompt_lengths(server, model)
    runs = sizing.size_runs(
        readiness_prompt, prompts, settings.max_tokens, measure.READINESS_TOKENS, max_len, f"qualify {server.url}"
    )
    for line in runs.notices:
        notify(line)
    readiness = measure.ready(server, model, settings, runs)
    kv_cache = allocation.check(target.predicted, measure.snapshot(server).cache_configs, target.server_log)
    outputs: list[OutputCheck] = []
    measure.warm_up(server, model, settings, runs)
    before = measure.snapshot(server)
    configured = before.speculation_configured if target.speculation is None else target.speculation
    served = measure.throughput(server, model, settings, runs, readiness, configured, outputs)
    after = measure.snapshot(server)
    spec = measure.spec_decode(before, after, configured)
    if target.hit_alignment_tokens:
        alignment, source = target.hit_alignment_tokens, "recipe gate (prefix_cache.hit_alignment_tokens)"
    elif after.block_size:
        alignment, source = after.block_size, "server (vllm:cache_config_info block_size)"
    else:
        alignment, source = None, "unknown: no recipe, and the server reports no block_size"
    enabled = target.prefix_caching if target.prefix_caching is not None else alignment is not None
    probe_fit = (
        sizing.size_probe(settings.prefix_blocks, alignment, card.max_model_len) if enabled and alignment else None
    )
    if probe_fit is not None and probe_fit.note:
        notify(probe_fit.note)
    prefix = measure.prefix_probe(server, model, settings, alignment, source, enabled, probe_fit)
    base, base_source = _baseline(baseline, model, settings, runs, outputs)
    speedup = (
        round(served.e2e_output_tokens_per_s / base.e2e_output_tokens_per_s, 3)
        if base and base.e2e_output_tokens_per_s
        else None
    )
    failures, warnings = _findings(spec, prefix, outputs, target.allow_degenerate)
    version = server.version()
    if version and version != target.predicted.vllm_version:
        warnings.append(
            f"the server runs vLLM {version}; the gate models {target.predicted.vllm_version} "
            f"(the recipe's base.vllm_version)"
        )
    if card.max_model_len is not None and target.max_model_len and card.max_model_len != target.max_model_len:
        warnings.append(
            f"the server's max_model_len is {card.max_model_len:,}; the recipe's serving.max_model_len "
            f"{target.max_model_len:,}"
        )
    if isinstance(baseline, BaselineResult) and base.run_tokens != served.run_tokens:
        warnings.append(
            f"the baseline ({base_source}) ran {base.run_tokens} output tokens a run, this run {served.run_tokens}"
        )
    expectations = _expectations(target, served.e2e_output_tokens_per_s, spec.acceptance_rate)
    notices = runs.notices + ((probe_fit.note,) if probe_fit is not None and probe_fit.note else ())
    return Qualification(
        schema=SCHEMA,
        url=server.url,
        model=model,
        recipe=target.recipe,
        vllm_version=version,
        sizing=Sizing(max_len, settings.max_tokens, runs.run_tokens, runs.skipped, notices),
        kv_cache=kv_cache,
        served=served,
        baseline=base,
        baseline_source=base_source,
        speedup=speedup,
        spec_decode=spec,
        prefix_cache=prefix,
        outputs=tuple(outputs),
        expectations=expectations,
        failures=tuple(failures),
        warnings=tuple(warnings),
    )


def _baseline(
    baseline: Union[Server, BaselineResult, None],
    model: str,
    settings: measure.Settings,
    runs: sizing.Runs,
    outputs: list[OutputCheck],
) -> tuple[Optional[Throughput], Optional[str]]:
    """The baseline's figures and where they come from: measured now on --baseline-url with the same runs, or
    the ``served`` figures of a --baseline-result file."""
    if baseline is None:
        return None, None
    if isinstance(baseline, BaselineResult):
        return baseline.result.served, f"--baseline-result {baseline.path}"
    base_ready = measure.ready(baseline, model, settings, runs)
    measure.warm_up(baseline, model, settings, runs)
    configured = measure.snapshot(baseline).speculation_configured
    return (
        measure.throughput(baseline, model, settings, runs, base_ready, configured, outputs),
        f"--baseline-url {baseline.url}",
    )


def _findings(
    spec: SpecDecode, prefix: PrefixCacheProbe, outputs: list[OutputCheck], allow_degenerate: bool
) -> tuple[list[str], list[str]]:
    failures, warnings = [], []
    if spec.configured and spec.drafts == 0:
        failures.append(
            f"speculative decoding is configured but made no drafts over the runs "
            f"(drafts +0, draft tokens +{spec.draft_tokens}, accepted +{spec.accepted})"
        )
    elif spec.configured and (spec.acceptance_rate or 0.0) < NEAR_ZERO_ACCEPTANCE:
        (warnings if allow_degenerate else failures).append(
            f"speculative decoding accepts almost nothing: {spec.accepted} of {spec.draft_tokens} "
            f"draft tokens ({(spec.acceptance_rate or 0.0):.1%} < {NEAR_ZERO_ACCEPTANCE:.0%}) over "
            f"{spec.drafts} drafts"
        )
    if spec.configured and spec.drafts and not spec.per_position_sums_to_accepted:
        warnings.append(
            f"accepted per position {list(spec.accepted_per_position)} does not sum to accepted {spec.accepted}"
        )
    if prefix.enabled and prefix.shared_prefix_tokens:
        if prefix.second_hit_tokens < prefix.predicted_hit_tokens:
            failures.append(
                f"prefix caching: a prompt sharing {prefix.shared_prefix_tokens} tokens with the one "
                f"before hit {prefix.second_hit_tokens} tokens, predicted {prefix.predicted_hit_tokens} "
                f"(hits every {prefix.hit_alignment_tokens} tokens, from the {prefix.alignment_source})"
            )
    elif not prefix.enabled:
        warnings.append(
            "prefix caching not probed: "
            f"{prefix.alignment_source if prefix.hit_alignment_tokens is None else 'off in the recipe'}"
        )
    for out in outputs:
        if out.empty:
            line = f"output ({out.prompt_class} prompt): {out.completion_tokens} tokens decode to no text"
            (warnings if allow_degenerate else failures).append(
                line + (" (allowed: --allow-degenerate)" if allow_degenerate else "")
            )
        if out.invalid_utf8:
            failures.append(f"output ({out.prompt_class} prompt) is not valid UTF-8: {out.sample!r}")
        if out.degenerate:
            line = f"output ({out.prompt_class} prompt) repeats one short cycle of tokens: {out.sample!r}"
            (warnings if allow_degenerate else failures).append(
                line + (" (allowed: --allow-degenerate)" if allow_degenerate else "")
            )
    return failures, warnings


def _expectations(target: Target, tokens_per_s: float, acceptance: Optional[float]) -> tuple[Expectation, ...]:
    out = []
    if target.min_decode_tokens_per_s is not None:
        out.append(
            Expectation(
                "qualify.min_decode_tokens_per_s",
                target.min_decode_tokens_per_s,
                tokens_per_s,
                tokens_per_s >= target.min_decode_tokens_per_s,
            )
        )
    if target.min_acceptance is not None:
        out.append(
            Expectation(
                "qualify.min_acceptance",
                target.min_acceptance,
                acceptance,
                acceptance is not None and acceptance >= target.min_acceptance,
            )
        )
    return tuple(out)


def raise_if_failed(result: Qualification) -> None:
    """ServedKvCacheDiffers (exit 30) for a KV cache other than the gate's, first; QualifyFailed (exit 24) for a
    misbehaving deployment; BelowExpectation (exit 25) for figures below the recipe's."""
    kv = result.kv_cache
    if kv.differences:
        more = len(result.failures) + sum(not e.met for e in result.expectations)
        raise ServedKvCacheDiffers(
            "\n".join(
                [
                    f"qualify {result.url}: the server's KV cache is not the gate's for {kv.recipe} "
                    f"(vLLM behaviour {kv.behaviour})" + (f"; {more} more finding(s) in the table" if more else ""),
                    *kv.differences,
                ]
            )
        )
    if result.failures:
        raise QualifyFailed("\n".join([f"qualify {result.url}: {len(result.failures)} finding(s)", *result.failures]))
    missed = [e for e in result.expectations if not e.met]
    if missed:
        raise BelowExpectation(
            "\n".join(
                [
                    f"qualify {result.url}: below the recipe's expectations ({result.recipe})",
                    *(f"{e.key}: measured {e.measured}, expected at least {e.minimum}" for e in missed),
                ]
            )
        )
