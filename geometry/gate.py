"""The mandatory build gate: judge a ``GeometryReport``.

The gate passes only if, for the vLLM behaviour the image has:
  1. vLLM would raise nothing (with and without the drafter);
  2. every drafter layer's real (unpadded) page equals the target's attention
     page P (the MLA latent page at the aligned block size);
  3. no attention page is padded;
  4. bytes per block, and so the number of blocks, are the same with the
     drafter as for the target alone with the same flags (same
     num_speculative_tokens: the KDA state widens with speculation whatever
     the drafter's layers cost, so that growth is reported but not blamed on
     the drafter).
"""

from __future__ import annotations

from dataclasses import dataclass

try:
    from .simulate import GeometryReport
except ImportError:  # pragma: no cover - script mode
    from simulate import GeometryReport  # type: ignore[no-redef]


class GeometryMismatch(Exception):
    """The geometry does not fit (exit code 1)."""

    def __init__(self, verdict: "Verdict"):
        super().__init__("; ".join(verdict.reasons))
        self.verdict = verdict


class OracleDisagreement(Exception):
    """The simulator and the installed vLLM disagree (exit code 2)."""

    def __init__(self, differences: tuple[str, ...]):
        super().__init__("; ".join(differences))
        self.differences = differences


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reasons: tuple[str, ...]
    behaviour: str
    target_attention_page: int | None
    drafter_bytes_per_token: int | None
    suggested_drafter_block: int | None
    suggested_is_kernel_multiple: bool | None
    drafter_kernel_block: int | None
    bytes_per_block_with: int | None
    bytes_per_block_without: int | None
    num_blocks_with: int | None
    num_blocks_without: int | None

    def raise_if_failed(self) -> None:
        if not self.passed:
            raise GeometryMismatch(self)


def check(report: GeometryReport) -> Verdict:
    reasons: list[str] = []
    w = report.with_drafter
    base = report.target_only_same_spec
    for label, plan in (("with the drafter", w), ("target alone", base),
                        ("without speculation", report.without_drafter)):
        if plan.error:
            reasons.append(f"vLLM would raise {label}: {plan.error}")
    p = w.target_attention_page
    drafter_rows = [r for r in w.layers if r.owner == "drafter"]
    bpt = drafter_rows[0].bytes_per_token if drafter_rows else None
    suggested = None
    multiple = None
    if p is not None and bpt:
        if p % bpt == 0:
            suggested = p // bpt
            if report.drafter_kernel_block:
                multiple = suggested % report.drafter_kernel_block == 0
    for r in drafter_rows:
        if p is not None and r.real_page_bytes != p:
            why = (f"drafter layer {r.name} ({r.spec_class}, {r.num_kv_heads} KV heads x "
                   f"head {r.head_size}, {r.dtype}: {r.bytes_per_token} B/token) at block "
                   f"{r.block_size} has a real page of {r.real_page_bytes:,} B, but the target "
                   f"attention page P is {p:,} B")
            if suggested is not None:
                why += (f"; block {suggested} would fit exactly ({p:,} / {bpt}), "
                        + ("a multiple" if multiple else "NOT a multiple")
                        + f" of the drafter kernel block {report.drafter_kernel_block}")
            else:
                why += f"; no drafter block fits exactly ({p:,} is not a multiple of {bpt})"
            reasons.append(why)
    for r in w.layers:
        if r.role != "kda" and r.role != "gdn" and r.padded:
            reasons.append(f"attention layer {r.name} ({r.role}) is padded: real page "
                           f"{r.real_page_bytes:,} B stored in {r.page_bytes:,} B")
    if w.bytes_per_block is not None and base.bytes_per_block is not None:
        if w.bytes_per_block != base.bytes_per_block:
            widest = max(w.groups, key=lambda g: g.bytes) if w.groups else None
            why = (f"bytes per block {w.bytes_per_block:,} with the drafter vs "
                   f"{base.bytes_per_block:,} for the target alone "
                   f"({w.num_blocks} vs {base.num_blocks} blocks in "
                   f"{report.kv_cache_memory_bytes:,} B)")
            if widest is not None:
                why += (f"; widest group {widest.index} ({widest.spec_class}, "
                        f"{len(widest.layer_names)} layers, roles {','.join(widest.roles)}) "
                        f"costs {widest.bytes:,} B per block")
            reasons.append(why)
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
    )
