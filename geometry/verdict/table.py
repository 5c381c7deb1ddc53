"""Render a GeometryReport (and Verdict) as a text table or a JSON dict."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from geometry.image_contract import Role
from geometry.kv.backends import CPU_FAMILY
from geometry.plan.capacity import kv_token_capacity
from geometry.plan.concurrency import Concurrency
from geometry.plan.prefix_cache import PrefixCache
from geometry.plan.report import GeometryReport, Plan
from geometry.plan.together import DEFINITION as AT_ONCE_DEFINITION
from geometry.verdict.gate import Verdict

GIB = 1 << 30


def _fmt(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def prefix_cache_line(pc: PrefixCache | None) -> str:
    """One line: what prefix caching does for this plan."""
    if pc is None:
        return "prefix caching: -"
    if not pc.enabled:
        return f"prefix caching: OFF (no cache hits; scheduler block {pc.scheduler_block_size:,} tokens)"
    reach = (
        "a prompt shorter than max_model_len can hit" if pc.can_hit else "NO prompt shorter than max_model_len can hit"
    )
    return (
        f"prefix caching: on, hits every {pc.hit_alignment_tokens:,} tokens (hash block "
        f"{pc.hash_block_size:,}, scheduler block {pc.scheduler_block_size:,}); {reach}"
    )


def alignment_phrase(requested: int | None, plan: Plan) -> str | None:
    """``4096 -> 12,288 (vLLM's hybrid alignment: ...)`` when vLLM changed the
    block size the recipe gives (None when it kept it or none was given)."""
    if requested is None or plan.block_size is None or plan.block_size == requested:
        return None
    state = next((r.real_page_bytes for r in plan.layers if r.kind.holds_state), None)
    why = (
        "vLLM's hybrid alignment: one block's target attention page must hold the "
        + (f"{state:,} B " if state else "")
        + "mamba state page"
        + (f", so the block grows in steps of {requested:,}" if plan.block_size % requested == 0 else "")
        + ")"
    )
    return f"{requested} -> {plan.block_size:,} ({why}"


def _plan_lines(title: str, plan: Plan, with_layers: bool, requested: int | None = None) -> list[str]:
    out = [f"== {title}"]
    if plan.error:
        out.append(f"   vLLM raises: {plan.error}")
    aligned = alignment_phrase(requested, plan)
    if aligned:
        out.append(f"   block_size {aligned}")
    out.append(
        f"   block_size {_fmt(plan.block_size)}  mamba page padded to "
        f"{_fmt(plan.mamba_page_size_padded)} B  layout {plan.layout}  "
        f"grouping {plan.grouping_path}"
    )
    out.append(
        f"   bytes/block {_fmt(plan.bytes_per_block)}  blocks {_fmt(plan.num_blocks)}  "
        f"tokens that fit {_fmt(plan.tokens_fit)}  KV capacity "
        f"{_fmt(kv_token_capacity(plan))} tokens  target attention page "
        f"{_fmt(plan.target_attention_page)} B"
    )
    out.append("   " + prefix_cache_line(plan.prefix_cache))
    if with_layers and plan.layers:
        # collapse identical rows (same role/owner/spec) to keep the table short
        seen: dict[tuple, list[str]] = {}
        for r in plan.layers:
            key = (
                r.owner,
                r.role,
                r.spec_class,
                r.block_size,
                r.num_kv_heads,
                r.head_size,
                r.dtype,
                r.bytes_per_token,
                r.real_page_bytes,
                r.page_bytes,
                r.block_stride_alignment,
            )
            seen.setdefault(key, []).append(r.name)
        out.append(
            f"   {'owner':7} {'role':15} {'spec':18} {'n':>3} {'block':>7} "
            f"{'B/token':>8} {'real page':>12} {'page':>12} {'pad':>4} {'stride al.':>10}"
        )
        for key, names in seen.items():
            owner, role, cls, bs, _kv, _hs, _dt, bpt, real, page, al = key
            out.append(
                f"   {owner:7} {role:15} {cls:18} {len(names):>3} {bs:>7} "
                f"{bpt:>8} {real:>12,} {page:>12,} {'yes' if page != real else 'no':>4} "
                f"{al:>10,}"
            )
    if plan.groups:
        out.append("   groups:")
        for g in plan.groups:
            out.append(
                f"     #{g.index:<2} {g.spec_class:24} roles={','.join(g.roles):32} "
                f"layers={len(g.layer_names):<3} block={g.block_size:<8} "
                f"bytes={g.bytes:,}{'  (draft)' if g.is_draft else ''}"
            )
    return out


def _nodes_line(report: GeometryReport) -> str:
    """Where the ranks run: the plans below are one rank's; every rank holds
    its share of every token, so the token capacity is the deployment's."""
    per_node = report.ranks_per_node * report.kv_cache_memory_bytes
    return (
        f"nodes: {report.nodes} x {report.ranks_per_node} rank"
        f"{'s' if report.ranks_per_node != 1 else ''} (TP {report.tensor_parallel_size}); "
        f"KV per node {per_node / GIB:.2f} GiB, {report.nodes * per_node / GIB:.2f} GiB in "
        "all; the plans below are per rank, their token capacity the deployment's"
    )


def _admitted_cell(fit) -> str:
    if fit.admitted is None:
        return "-"
    if fit.blocks_per_request is None:
        return f"0 (admission asks {fit.admission_blocks:,} blocks)"
    return f"{fit.admitted:,} ({fit.blocks_per_request:,} blocks, {fit.attention_blocks:,} of them attention)"


def _at_once_cell(fit) -> str:
    if fit.requests is None:
        return "-" if fit.stopped_by is None else f"- ({fit.stopped_by})"
    return f"{fit.requests:,} ({fit.work.prompt:,}+{fit.work.output:,}; one more: {fit.stopped_by})"


def concurrency_lines(c: Concurrency) -> list[str]:
    """Requests at once per length (the together model, with the drafter), the admission counts beside them,
    how close the capacity comes to the KV memory, and what max_num_seqs meets."""
    out = [
        f"== {AT_ONCE_DEFINITION}; a length of N tokens is a prompt and an output (min(4,096, N/4)) sent "
        f"together, in steps of up to {c.batched_tokens:,} tokens, {c.in_flight_tokens:,} tokens in flight",
        f"   {'tokens':>11}  at once, with the drafter (prompt+output; what stops one more)",
    ]
    for i, n in enumerate(c.contexts):
        mark = "  (max_model_len)" if n == c.max_model_len else ""
        out.append(f"   {n:>11,}  {_at_once_cell(c.fits['with_drafter'][i])}{mark}")
    out += [
        "   admitted: a prompt of N - 1 admitted and prefilled one after another, each keeping the blocks its "
        "prefill leaves it in every group, until the next is refused (the pool keeps 1 null block)",
        f"   {'tokens':>11}  {'with the drafter':38}  {'target alone, same spec':38}  target alone, no speculation",
    ]
    for i, n in enumerate(c.contexts):
        cells = [
            _admitted_cell(c.fits[label][i]) for label in ("with_drafter", "target_only_same_spec", "without_drafter")
        ]
        mark = "  (max_model_len)" if n == c.max_model_len else ""
        out.append(f"   {n:>11,}  {cells[0]:38}  {cells[1]:38}  {cells[2]}{mark}")
    h = c.headroom
    if h is not None:
        parts = " + ".join(f"{n} {role} x {b}" for role, n, b in h.layers)
        out.append(
            f"   attention KV {h.attention_bytes_per_token:,} B/token (the layers that keep every "
            f"token: {parts}); KV memory / bytes per token = {h.ideal_tokens:,} tokens; "
            f"capacity {h.capacity_tokens:,} = {100 * h.share:.2f} %"
        )
        total = h.kv_memory_bytes
        out.append(
            f"   the rest: {100 * h.block_padding_bytes / total:.2f} % in the blocks beyond the "
            f"kept tokens' KV (a block is as wide as the widest group, rounded up to the "
            f"stride alignment), {100 * h.below_one_block_bytes / total:.2f} % below one block; "
            f"the state, ring and window blocks a request holds besides are in the table above"
        )
    if c.max_num_seqs is None:
        out.append("   max_num_seqs: vLLM's default (not checked)")
    else:
        out.append(
            f"   max_num_seqs {c.max_num_seqs:,}"
            + ("" if c.refusals or c.warnings else ": fits at every listed length")
        )
    for r in c.refusals:
        out.append(f"   REFUSED: {r}")
    for w in c.warnings:
        out.append(f"   warning: {w}")
    return out


def _platform(family: int) -> str:
    return "vLLM's CPU platform" if family == CPU_FAMILY else f"GPU family {family}"


def _resolved(report: GeometryReport, owner: Role, asked: str | None) -> str:
    """A KV dtype as asked, with what `auto` resolved to when the plan's layers of that owner say it."""
    if asked != "auto":
        return str(asked)
    dtypes = sorted({r.dtype for r in report.with_drafter.layers if r.owner == owner and r.dtype})
    return f"auto ({'/'.join(dtypes)}, the {owner} model's dtype)" if dtypes else "auto"


def render_text(report: GeometryReport, verdict: Verdict | None = None, concurrency: Concurrency | None = None) -> str:
    lines = [
        f"KV geometry: {report.model_kind}, vLLM behaviour {report.behaviour}, "
        f"{_platform(report.capability_family)}, TP {report.tensor_parallel_size}, "
        f"num_speculative_tokens {report.num_speculative_tokens}",
        f"KV dtypes: target {_resolved(report, Role.TARGET, report.target_kv_dtype)}, "
        f"drafter {_resolved(report, Role.DRAFTER, report.drafter_kv_dtype)}; "
        f"backends (layer order) {', '.join(report.backends)}; kernel block alignment "
        f"{report.kernel_block_alignment}; drafter backend {report.drafter_backend} "
        f"(kernel block {report.drafter_kernel_block})",
        f"memory for the KV cache: {_fmt(report.kv_cache_memory_bytes)} B "
        f"({report.kv_cache_memory_bytes / GIB:.2f} GiB) per rank",
        _nodes_line(report),
    ]
    lines += _plan_lines("with the drafter", report.with_drafter, True, report.requested_block_size)
    lines += _plan_lines("target alone, same num_speculative_tokens", report.target_only_same_spec, False)
    lines += _plan_lines("target alone, no speculation", report.without_drafter, False)
    for n in report.notes:
        lines.append(f"note: {n}")
    if concurrency is not None:
        lines += concurrency_lines(concurrency)
    if verdict is not None:
        lines.append(f"VERDICT ({verdict.behaviour}): {'PASS' if verdict.passed else 'FAIL'}")
        for r in verdict.reasons:
            lines.append(f"  - {r}")
        if verdict.suggested_drafter_block is not None:
            lines.append(
                f"  exact-fit drafter block: {verdict.suggested_drafter_block} "
                f"(= {_fmt(verdict.target_attention_page)} / {verdict.drafter_bytes_per_token} B/token; "
                f"{'a multiple' if verdict.suggested_is_kernel_multiple else 'not a multiple'} of "
                f"the drafter kernel block {verdict.drafter_kernel_block})"
            )
    return "\n".join(lines)


def to_json(
    report: GeometryReport, verdict: Verdict | None = None, concurrency: Concurrency | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {"report": {**asdict(report), "ranks_per_node": report.ranks_per_node}}
    if concurrency is not None:
        data["concurrency"] = asdict(concurrency)
    if verdict is not None:
        data["verdict"] = asdict(verdict)
    return data
