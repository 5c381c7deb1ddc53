"""Find the settings a recipe controls that pass the gate (stdlib only).

What is searched (the rest of the gate input stays as given):

* ``block_size``: vLLM's own choice (the key left out), and multiples of the
  first backend's kernel block alignment from vLLM's hybrid block B0 up to
  4 x B0 (a smaller one is raised to B0 by vLLM's alignment).  Under the
  overlay a block can pass only if the drafter's page fits the target's
  attention page exactly: ``B x target B/token`` a multiple of the drafter's
  bytes per token, giving a drafter block that is a multiple of its kernel
  block (gate.check, check 2); blocks that cannot are not run;
* ``drafter_kv_cache_dtype``: ``auto`` (the model dtype) and ``fp8``;
* prefix caching on ("align") and off ("none");
* ``num_speculative_tokens``: the recipe's; only when nothing passes with it,
  every other value within the drafter's block (1 .. block - 1).

``keep`` names recipe keys (``SEARCHED``) held at the recipe's value: a serving
choice the user will not trade (prefix caching, the drafter's KV precision) or a
value fixed elsewhere.

Requests of max_model_len tokens fall as the block grows (the fixed state
blocks a request holds grow with it), so each combination's scan of larger
blocks stops after PATIENCE blocks in a row that admit fewer than the best
found so far (rounding lets a slightly larger block recover a request); the
scan goes by the admission count (requests admitted one after another, each
keeping its prefill's blocks: admission.py), which costs no stepping.

Every candidate is judged by one call, ``gate_verdict`` (geometry.verdict.gate_run.run_gate,
the public gate).  Passing settings are ranked by the requests of
max_model_len tokens at once (geometry/plan/together.py's DEFINITION, the
length split into a prompt and an output by ``together.workload``), then by the KV token capacity, then by
the prefix-cache hit alignment (finer first, off last), then by how few recipe
lines change.  A passing setting another one dominates (as good on every
measure the output shows: requests, KV capacity, hit alignment, the drafter's
KV precision and the recipe lines to change, and better on one) is dropped: no
reason to pick it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from geometry.image_contract import Behaviour, Role
from geometry.model.inputs import GeometryInputs
from geometry.plan.at_once import at_once
from geometry.plan.capacity import kv_token_capacity
from geometry.plan.concurrency import admitted_requests, max_model_len_of
from geometry.plan.limits import TooMuchToStep
from geometry.plan.report import GeometryReport
from geometry.plan.together_state import workload
from geometry.verdict.fit_keys import KEEPABLE, SEARCHED
from geometry.verdict.gate import Verdict
from geometry.verdict.gate_run import run_gate

DRAFTER_KV_DTYPES = ("auto", "fp8")
BLOCK_RANGE = 2  # blocks searched: B0 .. BLOCK_RANGE x B0
PATIENCE = 4  # a scan stops after this many blocks in a row below the best count


def gate_verdict(inputs: GeometryInputs) -> tuple[GeometryReport, Verdict]:
    """The gate on one gate input: the one gate every caller runs (geometry.verdict.gate_run)."""
    run = run_gate(inputs)
    return run.report, run.verdict


@dataclass(frozen=True)
class Setting:
    block_size: int | None
    drafter_kv_cache_dtype: str | None
    enable_prefix_caching: bool
    num_speculative_tokens: int


@dataclass(frozen=True)
class Candidate:
    setting: Setting
    passed: bool
    block_size: int | None  # as vLLM runs it (after alignment)
    requests_at_max_model_len: int | None
    kv_tokens: int | None
    changes: tuple[tuple[str, Any, Any], ...]  # (recipe key, recipe's value, suggested value)
    reason: str | None  # the first gate reason when it fails
    hit_alignment_tokens: int | None = None  # prefix-cache hits land every this many tokens; None: no hits
    admitted_at_max_model_len: int | None = None  # admitted one after another (admission.py): the scan's guide

    def measures(self) -> tuple:
        """What the output shows of a setting, each larger-is-better: requests of max_model_len at once,
        KV capacity, prefix-cache hits (finer is better, none worst), the drafter's KV at the model's
        precision (fp8 may lower acceptance), fewer recipe lines to change."""
        hits = -self.hit_alignment_tokens if self.hit_alignment_tokens is not None else -math.inf
        precise = self.setting.drafter_kv_cache_dtype != "fp8"
        return (self.requests_at_max_model_len or 0, self.kv_tokens or 0, hits, precise, -len(self.changes))

    def dominated_by(self, other: Candidate) -> bool:
        """``other`` is as good on every measure and better on one."""
        mine, theirs = self.measures(), other.measures()
        return all(t >= m for m, t in zip(mine, theirs)) and theirs != mine


@dataclass(frozen=True)
class FitResult:
    recipe: Candidate
    ranked: tuple[Candidate, ...]  # passing settings, best first
    evaluated: int
    searched: str  # what was searched, one phrase
    why_none: str | None  # one line when nothing passes

    @property
    def recipe_is_best(self) -> bool:
        return self.recipe.passed and (not self.ranked or _key(self.ranked[0]) <= _key(self.recipe))


def _key(c: Candidate) -> tuple:
    return (c.requests_at_max_model_len or 0, c.kv_tokens or 0)


def _apply(inputs: GeometryInputs, s: Setting) -> GeometryInputs:
    return inputs.replace(
        block_size=s.block_size,
        drafter_kv_cache_dtype=s.drafter_kv_cache_dtype,
        enable_prefix_caching=s.enable_prefix_caching,
        mamba_cache_mode="align" if s.enable_prefix_caching else "none",
        num_speculative_tokens=s.num_speculative_tokens,
    )


def _changes(recipe: Setting, s: Setting) -> tuple:
    out = []
    for key, name in SEARCHED:
        if getattr(recipe, name) != getattr(s, name):
            out.append((key, getattr(recipe, name), getattr(s, name)))
    return tuple(out)


def _candidate(
    inputs: GeometryInputs, recipe: Setting, s: Setting, gate: Callable, last: list[int] | None = None
) -> tuple[Candidate, GeometryReport]:
    """One setting judged; ``last``: the count at once found before, where the next search for a count
    starts (a guess: settings near each other hold near counts, and a near guess costs fewer runs; the
    count is the same), updated here."""
    applied = _apply(inputs, s)
    try:
        report, verdict = gate(applied)
    except ValueError as exc:  # BadInput: a setting the simulator does not model
        return Candidate(s, False, None, None, None, _changes(recipe, s), str(exc)), None
    plan = report.with_drafter
    pc = plan.prefix_cache
    tokens = max_model_len_of(applied)
    admitted = admitted_requests(plan, applied, "with_drafter", tokens, report.behaviour)
    return Candidate(
        s,
        verdict.passed,
        plan.block_size,
        _at_once(report, applied, tokens, admitted, last) if verdict.passed else None,
        kv_token_capacity(plan),
        _changes(recipe, s),
        verdict.reasons[0] if verdict.reasons else None,
        pc.hit_alignment_tokens if pc is not None and pc.can_hit else None,
        admitted,
    ), report


def _at_once(
    report: GeometryReport, inputs: GeometryInputs, tokens: int, admitted: int | None, last: list[int] | None
) -> int | None:
    """Requests of max_model_len at once (together.py's count, the length split by together_state.workload), the
    search starting at ``last``'s count, else at the admission count; None when vLLM cannot plan or the
    run is beyond the model."""
    start = last[0] if last else admitted or 1
    try:
        got = at_once(
            report.with_drafter, inputs, "with_drafter", workload(tokens), report.behaviour, start=start, alone=False
        )
    except TooMuchToStep:
        return None
    if last is not None and got.requests:
        last[:] = [got.requests]
    return got.requests


def _fit_unit(report: GeometryReport) -> tuple[int, int, int] | None:
    """(unit, target B/token, drafter B/token): the drafter's page equals the target's
    attention page only at blocks that are multiples of unit."""
    plan = report.with_drafter
    rows = [r for r in plan.layers if r.owner is Role.DRAFTER]
    if not rows or not plan.target_attention_page or not plan.block_size:
        return None
    t_bpt = plan.target_attention_page // plan.block_size
    d_bpt = rows[0].bytes_per_token
    kernel = report.drafter_kernel_block or 1
    step = report.kernel_block_alignment or 1
    return math.lcm(step, (d_bpt * kernel) // math.gcd(d_bpt * kernel, t_bpt)), t_bpt, d_bpt


def _blocks_for(report: GeometryReport | None, behaviour: Behaviour) -> list[int]:
    if report is None or report.with_drafter.block_size is None:
        return []
    b0 = report.with_drafter.block_size
    step = report.kernel_block_alignment or 16
    last = BLOCK_RANGE * b0
    fit = _fit_unit(report) if behaviour is Behaviour.OVERLAY else None
    if fit is not None:  # a necessary condition of gate check 2 (drafter page == P)
        unit = math.lcm(fit[0], step)
        return [b for b in range(-(-b0 // unit) * unit, last + 1, unit) if b != b0]
    return [b for b in range(b0 + step, last + 1, step)]


def search(inputs: GeometryInputs, gate: Callable = gate_verdict, keep: frozenset[str] = frozenset()) -> FitResult:
    """The passing settings for ``inputs``, best first, ``keep``'s keys at the recipe's values (see the
    module docstring)."""
    unknown = sorted(set(keep) - set(KEEPABLE))
    if unknown:
        raise ValueError(f"keep: {unknown[0]!r} is not one of {', '.join(KEEPABLE)}")
    recipe = Setting(
        inputs.block_size, inputs.drafter_kv_cache_dtype, inputs.enable_prefix_caching, inputs.num_speculative_tokens
    )
    last: list[int] = []
    own, _ = _candidate(inputs, recipe, recipe, gate, last)
    seen = {recipe: own}
    reports: dict[Setting, GeometryReport | None] = {}
    keep_block = "serving.block_size" in keep
    dtypes = (
        DRAFTER_KV_DTYPES
        if inputs.has_drafter and "serving.drafter_kv_cache_dtype" not in keep
        else (inputs.drafter_kv_cache_dtype,)
    )
    prefixes = (
        (inputs.enable_prefix_caching,)
        if "serving.enable_prefix_caching" in keep
        else (inputs.enable_prefix_caching, not inputs.enable_prefix_caching)
    )

    def run(num_spec: int) -> None:
        for dtype in dtypes:
            for prefix in prefixes:
                auto = Setting(inputs.block_size if keep_block else None, dtype, prefix, num_spec)
                if auto not in reports:
                    seen[auto], reports[auto] = _candidate(inputs, recipe, auto, gate, last)
                if keep_block:
                    continue
                below = 0
                for b in _blocks_for(reports[auto], inputs.vllm_behaviour):
                    s = Setting(b, dtype, prefix, num_spec)
                    if s not in seen:
                        seen[s] = _candidate(inputs, recipe, s, gate, last)[0]
                    best = max((c.admitted_at_max_model_len or 0 for c in seen.values() if c.passed), default=None)
                    got = seen[s].admitted_at_max_model_len
                    below = below + 1 if best is not None and got is not None and got < best else 0
                    if below == PATIENCE:
                        break  # larger blocks hold fewer requests (fixed state blocks grow)

    run(inputs.num_speculative_tokens)
    spec_searched = f"num_speculative_tokens {inputs.num_speculative_tokens}"
    block = _drafter_block(inputs)
    if (
        not any(c.passed for c in seen.values())
        and block
        and block > 2
        and "serving.num_speculative_tokens" not in keep
    ):
        for n in range(1, block):
            if n != inputs.num_speculative_tokens:
                run(n)
        spec_searched = f"num_speculative_tokens 1-{block - 1}"
    passing = [c for c in seen.values() if c.passed]
    ranked = sorted(
        (c for c in passing if not any(c.dominated_by(o) for o in passing)),
        key=lambda c: (-_key(c)[0], -_key(c)[1], -c.measures()[2], len(c.changes), -c.setting.num_speculative_tokens),
    )
    if keep_block:
        kept_block = f"{inputs.block_size:,}" if inputs.block_size else "vLLM's own"
        blocks = f"block_size {kept_block} (the recipe's)"
    else:
        blocks = f"block_size vLLM's own and up to {BLOCK_RANGE} x its hybrid block"
    prefix_searched = (
        "prefix caching on/off"
        if len(prefixes) == 2
        else f"prefix caching {'on' if inputs.enable_prefix_caching else 'off'}"
    )
    searched = f"{blocks}, drafter KV {'/'.join(d for d in dtypes if d)}, {prefix_searched}, {spec_searched}" + (
        f" (kept: {', '.join(k for k in KEEPABLE if k in keep)})" if keep else ""
    )
    why = None
    if not ranked:
        why = _why_none(inputs, reports, own, len(seen), searched)
    return FitResult(own, tuple(ranked), len(seen), searched, why)


def _why_none(inputs: GeometryInputs, reports: dict, own: Candidate, tried: int, searched: str) -> str:
    """One line: why no setting passes."""
    auto = next(
        (
            r
            for s, r in reports.items()
            if r is not None and r.with_drafter.block_size and s.drafter_kv_cache_dtype == inputs.drafter_kv_cache_dtype
        ),
        None,
    )
    fit = _fit_unit(auto) if auto is not None and inputs.vllm_behaviour is Behaviour.OVERLAY else None
    b0 = auto.with_drafter.block_size if auto is not None else None
    if fit is not None and fit[0] > BLOCK_RANGE * b0:
        unit, t_bpt, d_bpt = fit
        return (
            f"no setting passes: the drafter's {d_bpt:,} B/token fills the target's attention "
            f"page ({t_bpt:,} B/token x block) exactly, in whole drafter kernel blocks of "
            f"{auto.drafter_kernel_block}, only at blocks that are multiples of {unit:,}, beyond "
            f"{BLOCK_RANGE} x vLLM's hybrid block {b0:,} ({tried} settings tried)"
        )
    return f"no setting passes ({tried} tried: {searched}); the recipe's: {own.reason or 'passes'}"


def _drafter_block(inputs: GeometryInputs) -> int | None:
    return inputs.drafter.block_size if inputs.drafter is not None else None


def _value(v: Any, new: bool = True) -> str:
    if v is None:
        return "(remove the key: vLLM picks)" if new else "unset"
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def _hits(c: Candidate) -> str:
    if c.hit_alignment_tokens is None:
        return "no prefix-cache hits"
    return f"prefix-cache hits every {c.hit_alignment_tokens:,} tokens"


def _line(c: Candidate) -> str:
    return (
        f"block_size {c.block_size:,}  requests of max_model_len at once "
        f"{c.requests_at_max_model_len if c.requests_at_max_model_len is not None else '-'}  "
        f"KV capacity {c.kv_tokens:,} tokens  {_hits(c)}"
        if c.block_size and c.kv_tokens is not None
        else f"does not plan: {c.reason}"
    )


def render_text(result: FitResult, top: int = 3) -> str:
    own = result.recipe
    lines = [f"recipe: {'PASS' if own.passed else 'FAIL'}  {_line(own)}"]
    if not own.passed and own.reason:
        lines.append(f"  - {own.reason}")
    lines.append(f"searched {result.evaluated} settings: {result.searched}")
    if result.why_none:
        lines.append(result.why_none)
        return "\n".join(lines)
    if result.recipe_is_best:
        lines.append("the recipe's settings are the best that pass")
    for i, c in enumerate(result.ranked[:top], 1):
        lines.append(f"#{i} {_line(c)}")
        if not c.changes:
            lines.append("   (the recipe as it is)")
        for key, old, new in c.changes:
            lines.append(f"   {key}: {_value(new)}    # was {_value(old, False)}")
        if ("serving.enable_prefix_caching", True, False) in c.changes:
            lines.append("   (prefix caching off: no cache hits)")
        if any(key == "serving.drafter_kv_cache_dtype" and new == "fp8" for key, _old, new in c.changes):
            lines.append(
                "   (fp8 drafter KV: the drafter reads a coarser KV, which can lower acceptance: `qualify` it)"
            )
    return "\n".join(lines)


def to_json(result: FitResult, top: int = 3) -> dict:
    from dataclasses import asdict

    return {
        "recipe": asdict(result.recipe),
        "recipe_is_best": result.recipe_is_best,
        "suggestions": [asdict(c) for c in result.ranked[:top]],
        "evaluated": result.evaluated,
        "searched": result.searched,
        "why_none": result.why_none,
    }
