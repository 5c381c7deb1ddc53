"""KV token capacity of a plan (stdlib only).

vLLM 0.33.0 counts capacity per request as the sum over KV-cache groups of
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
