"""Stock against overlay for one deployment: the two gate runs' figures side by side and their
ratio (stdlib only). ``build.py geometry`` prints it after the table of the behaviour it judges."""

from __future__ import annotations

from dataclasses import dataclass

from geometry.image_contract import Behaviour
from geometry.plan.capacity import kv_token_capacity
from geometry.plan.concurrency import Concurrency
from geometry.plan.report import GeometryReport
from geometry.verdict.gate import Verdict


@dataclass(frozen=True)
class BehaviourFigures:
    """One behaviour's with-drafter plan, as vLLM reports it and as the gate weighs it."""

    behaviour: Behaviour
    passed: bool
    reasons: tuple[str, ...]
    group_blocks: tuple[int, ...]  # vLLM's "kv cache group sizes"
    bytes_per_block: int | None
    num_blocks: int | None
    kv_capacity_tokens: int | None  # the gate's (geometry/plan/capacity.py)
    vllm_kv_cache_size_tokens: int | None  # what vLLM logs ("KV cache size: N tokens")


@dataclass(frozen=True)
class BehaviourComparison:
    stock: BehaviourFigures
    overlay: BehaviourFigures
    # overlay / stock of vLLM's logged KV cache size (None when either plan fails)
    vllm_kv_cache_size_ratio: float | None
    kv_capacity_ratio: float | None


def figures(report: GeometryReport, verdict: Verdict, at_once: Concurrency) -> BehaviourFigures:
    plan = report.with_drafter
    sizes = at_once.vllm_kv_cache_size_tokens or {}
    return BehaviourFigures(
        behaviour=report.behaviour,
        passed=verdict.passed,
        reasons=verdict.reasons,
        group_blocks=tuple(g.block_size for g in plan.groups),
        bytes_per_block=plan.bytes_per_block,
        num_blocks=plan.num_blocks,
        kv_capacity_tokens=kv_token_capacity(plan),
        vllm_kv_cache_size_tokens=sizes.get("with_drafter"),
    )


def _ratio(over: int | None, stock: int | None) -> float | None:
    return round(over / stock, 4) if over and stock else None


def compare(stock: BehaviourFigures, overlay: BehaviourFigures) -> BehaviourComparison:
    return BehaviourComparison(
        stock,
        overlay,
        _ratio(overlay.vllm_kv_cache_size_tokens, stock.vllm_kv_cache_size_tokens),
        _ratio(overlay.kv_capacity_tokens, stock.kv_capacity_tokens),
    )


def _fmt(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def comparison_lines(c: BehaviourComparison) -> list[str]:
    out = ["== stock vs overlay (with the drafter)"]
    for f in (c.stock, c.overlay):
        blocks = ", ".join(map(str, f.group_blocks))
        out.append(
            f"   {f.behaviour:8} {'PASS' if f.passed else 'FAIL'}  group blocks ({blocks})  "
            f"bytes/block {_fmt(f.bytes_per_block)}  blocks {_fmt(f.num_blocks)}  vLLM's KV cache size "
            f"{_fmt(f.vllm_kv_cache_size_tokens)} tokens  KV capacity {_fmt(f.kv_capacity_tokens)} tokens"
        )
    if c.vllm_kv_cache_size_ratio is not None:
        out.append(
            f"   overlay / stock: vLLM's KV cache size x{c.vllm_kv_cache_size_ratio:.4f}, KV capacity "
            + (f"x{c.kv_capacity_ratio:.4f}" if c.kv_capacity_ratio is not None else "-")
        )
    return out
