"""KV token capacity of a plan, and the reason the gate gives when the drafter costs some (stdlib only).

The modelled vLLM release counts capacity per request as the sum over KV-cache groups of
the blocks each group draws from the one shared pool
(``get_max_concurrency_for_kv_cache_config``).  Groups whose layers keep every
token (full attention and MLA, target or drafter; spec class
``FullAttentionSpec`` / ``MLAAttentionSpec``) draw ``ceil(tokens / block)``
blocks each; KDA/GDN state, sliding-window and ring groups draw a fixed
handful per request.  So the longest context the pool holds is, to within
those few fixed blocks per request,

    tokens = num_blocks / sum over full-attention groups of (1 / group block)

which for one group of block B is ``num_blocks x B``, and for two groups of
block B is half that: splitting the target's attention layers over more groups
costs capacity even when each block gets smaller.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any


def full_attention_groups(plan: Any) -> list:
    """The plan's groups that keep every token."""
    return [g for g in plan.groups if g.kind.keeps_every_token]


def kv_token_capacity(plan: Any) -> int | None:
    """Tokens of context the plan's pool holds (None when vLLM cannot plan)."""
    if plan.error or plan.num_blocks is None:
        return None
    groups = full_attention_groups(plan)
    if not groups:
        return None
    per_token = sum(Fraction(1, g.block_size) for g in groups)  # blocks per token
    return int(Fraction(plan.num_blocks) / per_token)


def _groups_phrase(plan: Any) -> str:
    groups = full_attention_groups(plan)
    blocks = sorted({g.block_size for g in groups})
    return (
        f"{plan.num_blocks:,} blocks of {plan.bytes_per_block:,} B shared by "
        f"{len(groups)} full-attention group{'s' if len(groups) != 1 else ''} of block "
        f"{'/'.join(map(str, blocks))}"
    )


def capacity_loss_reason(report: Any, w: Any, base: Any, cap_with: int, cap_base: int) -> str:
    """Why the plan with the drafter (``w``) holds fewer tokens than the target alone's (``base``)."""
    why = (
        f"KV capacity {cap_with:,} tokens with the drafter vs {cap_base:,} for the "
        f"target alone ({_groups_phrase(w)}, vs {_groups_phrase(base)}, in "
        f"{report.kv_cache_memory_bytes:,} B)"
    )
    widest = max(w.groups, key=lambda g: g.bytes) if w.groups else None
    if widest is not None and w.bytes_per_block > base.bytes_per_block:
        why += (
            f"; widest group {widest.index} ({widest.spec_class}, "
            f"{len(widest.layer_names)} layers, roles {','.join(widest.roles)}) "
            f"costs {widest.bytes:,} B per block"
        )
    return why
