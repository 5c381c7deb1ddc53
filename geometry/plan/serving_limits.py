"""Whether the pool can serve at all (stdlib only).

The page and capacity checks of gate.check say whether the drafter costs the
target KV capacity; these say whether the deployment can serve one request:
at least one block fits in the KV memory, ``max_model_len`` is within the
target's ``max_position_embeddings``, one request of ``max_model_len``
tokens fits in the pool (geometry/plan/capacity.py's token capacity, as the verdict has it), and its
prefill is within the scheduler steps the admission model walks through (limits.py).
"""

from __future__ import annotations

from geometry.model.inputs import GeometryInputs
from geometry.plan.concurrency import batched_tokens
from geometry.plan.limits import prefill_steps_reason
from geometry.plan.report import GeometryReport


def serving_limit_reasons(report: GeometryReport, inputs: GeometryInputs, capacity: int | None) -> tuple[str, ...]:
    """Why the pool cannot serve one request of ``max_model_len`` tokens (empty when it can);
    ``capacity``: the token capacity of the plan with the drafter (capacity.kv_token_capacity)."""
    reasons = []
    max_pos = inputs.target.max_position_embeddings
    wanted = inputs.max_model_len if inputs.max_model_len is not None else max_pos
    steps = prefill_steps_reason(wanted, batched_tokens(inputs)) if wanted is not None else None
    if steps:
        reasons.append(steps)
    if inputs.max_model_len is not None and max_pos is not None and inputs.max_model_len > max_pos:
        reasons.append(
            f"max_model_len {inputs.max_model_len:,} is above the target's max_position_embeddings {max_pos:,}"
        )
    plan = report.with_drafter
    if plan.error or plan.num_blocks is None or not plan.bytes_per_block:
        return tuple(reasons)
    if plan.num_blocks == 0:
        reasons.append(
            f"no KV block fits: one block takes {plan.bytes_per_block:,} B and the KV cache has "
            f"{report.kv_cache_memory_bytes:,} B"
        )
        return tuple(reasons)
    if capacity is None:
        capacity = plan.tokens_fit
    if wanted is not None and capacity is not None and capacity < wanted:
        block_tokens = plan.tokens_fit // plan.num_blocks
        needed = -(-wanted // block_tokens)
        reasons.append(
            f"one request of max_model_len {wanted:,} tokens needs at least {needed:,} blocks of "
            f"{block_tokens:,} tokens, but the KV cache ({report.kv_cache_memory_bytes:,} B at "
            f"{plan.bytes_per_block:,} B per block) holds {plan.num_blocks:,} blocks "
            f"({capacity:,} tokens)"
        )
    return tuple(reasons)
