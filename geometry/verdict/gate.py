"""The mandatory build gate: judge a ``GeometryReport``.

The gate passes only if, for the vLLM behaviour the image has:
  1. vLLM would raise nothing (with and without the drafter);
  2. every drafter layer's real (unpadded) page equals the target's attention
     page P (the MLA latent page at the aligned block size, else the first
     full-attention layer's, before unify can grow it to a drafter's page);
  3. no attention page is padded;
  4. the KV token capacity (geometry/plan/capacity.py: the context the shared
     pool holds, counting every group that keeps all tokens) with the drafter
     is at least the target alone's with the same flags (same
     num_speculative_tokens: the KDA state widens with speculation whatever
     the drafter's layers cost, so that growth is reported but not blamed on
     the drafter).  Bytes per block may differ: a drafter that makes blocks
     smaller passes if the capacity holds, and fails if it splits the
     target's attention layers over more groups and so loses capacity;
  5. with prefix caching on: every drafter block divides the target's block,
     and cache hits land at most one target block apart.
``judge`` adds whether the pool can serve one request at all
(geometry/plan/serving_limits.py) and whether vLLM starts with ``max_num_seqs``
(geometry/plan/concurrency.py); geometry/verdict/gate_run.py runs it for every caller.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geometry.image_contract import Behaviour, Role
from geometry.model.inputs import GeometryInputs
from geometry.plan.capacity import capacity_loss_reason, kv_token_capacity
from geometry.plan.concurrency import max_num_seqs_refusals
from geometry.plan.report import GeometryReport, Plan
from geometry.plan.serving_limits import serving_limit_reasons


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: tuple[str, ...]
    behaviour: Behaviour
    target_attention_page: int | None
    drafter_bytes_per_token: int | None
    suggested_drafter_block: int | None
    suggested_is_kernel_multiple: bool | None
    drafter_kernel_block: int | None
    bytes_per_block_with: int | None
    bytes_per_block_without: int | None
    num_blocks_with: int | None
    num_blocks_without: int | None
    kv_tokens_with: int | None = None
    kv_tokens_without: int | None = None


def check(report: GeometryReport) -> Verdict:
    reasons: list[str] = []
    w = report.with_drafter
    base = report.target_only_same_spec
    for label, plan in (
        ("with the drafter", w),
        ("target alone", base),
        ("without speculation", report.without_drafter),
    ):
        if plan.error:
            reasons.append(f"vLLM would raise {label}: {plan.error}")
    p = w.target_attention_page
    drafter_rows = [r for r in w.layers if r.owner is Role.DRAFTER]
    bpt = drafter_rows[0].bytes_per_token if drafter_rows else None
    suggested = None
    multiple = None
    if p is not None and bpt:
        if p % bpt == 0:
            suggested = p // bpt
            if report.drafter_kernel_block:
                multiple = suggested % report.drafter_kernel_block == 0
    # Drafter layers alike (same spec, heads, dtype, block and page) give one reason, with their count.
    misfits: dict[tuple, list] = {}
    for r in drafter_rows:
        if p is not None and r.real_page_bytes != p:
            key = (
                r.spec_class,
                r.num_kv_heads,
                r.head_size,
                r.dtype,
                r.bytes_per_token,
                r.block_size,
                r.real_page_bytes,
            )
            misfits.setdefault(key, []).append(r)
    for alike in misfits.values():
        r = alike[0]
        why = (
            f"drafter layer {r.name} ({r.spec_class}, {r.num_kv_heads} KV heads x "
            f"head {r.head_size}, {r.dtype}: {r.bytes_per_token} B/token) at block "
            f"{r.block_size} has a real page of {r.real_page_bytes:,} B, but the target "
            f"attention page P is {p:,} B"
        )
        if suggested is not None:
            why += (
                f"; block {suggested} would fit exactly ({p:,} / {bpt}), "
                + ("a multiple" if multiple else "NOT a multiple")
                + f" of the drafter kernel block {report.drafter_kernel_block}"
            )
        else:
            why += f"; no drafter block fits exactly ({p:,} is not a multiple of {bpt})"
        if len(alike) > 1:
            others = alike[1:]
            why += (
                f" [{len(alike)}x: also {others[0].name}" + (f" to {others[-1].name}" if len(others) > 1 else "") + "]"
            )
        reasons.append(why)
    for r in w.layers:
        if r.role != "kda" and r.role != "gdn" and r.padded:
            reasons.append(
                f"attention layer {r.name} ({r.role}) is padded: real page "
                f"{r.real_page_bytes:,} B stored in {r.page_bytes:,} B"
            )
    prefix_reasons = _prefix_cache_reasons(w) if w.prefix_cache is not None and w.prefix_cache.enabled else []
    cap_with, cap_base = kv_token_capacity(w), kv_token_capacity(base)
    if cap_with is not None and cap_base is not None and cap_with < cap_base:
        reasons.append(capacity_loss_reason(report, w, base, cap_with, cap_base))
    reasons.extend(prefix_reasons)
    return Verdict(
        passed=not reasons,
        reasons=tuple(reasons),
        behaviour=report.behaviour,
        target_attention_page=p,
        drafter_bytes_per_token=bpt,
        suggested_drafter_block=suggested,
        suggested_is_kernel_multiple=multiple,
        drafter_kernel_block=report.drafter_kernel_block,
        bytes_per_block_with=w.bytes_per_block,
        bytes_per_block_without=base.bytes_per_block,
        num_blocks_with=w.num_blocks,
        num_blocks_without=base.num_blocks,
        kv_tokens_with=cap_with,
        kv_tokens_without=cap_base,
    )


def _prefix_cache_reasons(w: Plan) -> list[str]:
    """Prefix caching on: a drafter block that does not divide the target block
    leaves hits on the blocks' least common multiple (vLLM #55622 saw 0 %
    hits), and hits further apart than one target block waste the cache."""
    reasons = []
    target_block = next(
        (r.block_size for r in w.layers if r.owner is Role.TARGET and r.role in ("mla_latent", "attention")), None
    )
    if target_block is None:
        return reasons
    for block in sorted({r.block_size for r in w.layers if r.owner is Role.DRAFTER}):
        if target_block % block:
            reasons.append(
                f"prefix caching: drafter block {block} does not divide the target "
                f"block {target_block} (hash block {w.prefix_cache.hash_block_size}, "
                f"scheduler block {w.prefix_cache.scheduler_block_size})"
            )
    alignment = w.prefix_cache.hit_alignment_tokens
    if alignment > target_block:
        reasons.append(
            f"prefix caching: cache hits land every {alignment:,} tokens, more than the target block {target_block}"
        )
    return reasons


def judge(report: GeometryReport, inputs: GeometryInputs) -> Verdict:
    """The gate's verdict: the checks of ``check`` plus the serving limits."""
    verdict = check(report)
    extra = serving_limit_reasons(report, inputs, verdict.kv_tokens_with) + max_num_seqs_refusals(
        report, inputs.max_num_seqs
    )
    if not extra:
        return verdict
    return replace(verdict, passed=False, reasons=verdict.reasons + extra)
