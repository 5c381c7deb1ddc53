"""Capacity checks every gate caller adds to the page-geometry verdict (stdlib only).

The page checks (gate.check) say whether the drafter costs the target KV
capacity; these say whether the pool can serve at all: at least one block
fits in the KV memory, ``max_model_len`` is within the target's
``max_position_embeddings``, and one request of ``max_model_len`` tokens fits
in the pool's token slots (a lower bound: the attention group alone needs
``ceil(max_model_len / block)`` blocks).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

try:  # package import (tests, build driver) or sibling import (the gate as a script)
    from .gate import Verdict, check
    from .inputs import GeometryInputs
    from .simulate import GeometryReport
except ImportError:  # pragma: no cover - script mode
    from gate import Verdict, check  # type: ignore[no-redef]
    from inputs import GeometryInputs  # type: ignore[no-redef]
    from simulate import GeometryReport  # type: ignore[no-redef]


def _max_position_embeddings(target_config: Mapping[str, Any]) -> int | None:
    text = target_config.get("text_config")
    value = (text if isinstance(text, Mapping) else target_config).get("max_position_embeddings")
    return value if type(value) is int and value > 0 else None


def capacity_reasons(report: GeometryReport, inputs: GeometryInputs) -> tuple[str, ...]:
    """Why the pool cannot serve one request of ``max_model_len`` tokens (empty when it can)."""
    reasons = []
    max_pos = _max_position_embeddings(inputs.target_config)
    wanted = inputs.max_model_len if inputs.max_model_len is not None else max_pos
    if inputs.max_model_len is not None and max_pos is not None and inputs.max_model_len > max_pos:
        reasons.append(f"max_model_len {inputs.max_model_len:,} is above the target's "
                       f"max_position_embeddings {max_pos:,}")
    plan = report.with_drafter
    if plan.error or plan.num_blocks is None or not plan.bytes_per_block:
        return tuple(reasons)
    block_tokens = plan.tokens_fit // plan.num_blocks if plan.num_blocks else None
    if plan.num_blocks == 0:
        reasons.append(f"no KV block fits: one block takes {plan.bytes_per_block:,} B and the KV cache has "
                       f"{report.kv_cache_memory_bytes:,} B")
    elif wanted is not None and plan.tokens_fit < wanted:
        needed = -(-wanted // block_tokens)
        reasons.append(f"one request of max_model_len {wanted:,} tokens needs at least {needed:,} blocks of "
                       f"{block_tokens:,} tokens, but the KV cache ({report.kv_cache_memory_bytes:,} B at "
                       f"{plan.bytes_per_block:,} B per block) holds {plan.num_blocks:,} blocks "
                       f"({plan.tokens_fit:,} tokens)")
    return tuple(reasons)


def judge(report: GeometryReport, inputs: GeometryInputs) -> Verdict:
    """The gate's verdict: the page checks of gate.check plus the capacity checks."""
    verdict = check(report)
    extra = capacity_reasons(report, inputs)
    if not extra:
        return verdict
    return replace(verdict, passed=False, reasons=verdict.reasons + extra)
