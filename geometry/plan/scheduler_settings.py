"""What the plan and the gate input say vLLM's scheduler runs by (stdlib only): a step's token budget,
the batches in flight, the block the scheduler allocates by, the speculation each plan runs with,
max_model_len, and the null block the pool keeps back (geometry/plan/concurrency.py's module docstring
names vLLM's sources).
"""

from __future__ import annotations

from geometry.image_contract import Behaviour, Role
from geometry.kv import backends as B
from geometry.model.inputs import GeometryInputs
from geometry.plan.admission import Scheduling, lookahead_tokens
from geometry.plan.report import Plan

NULL_BLOCKS = 1  # BlockPool's null block


def batched_tokens(inputs: GeometryInputs) -> int:
    """A step's token budget: the gate input's ``max_num_batched_tokens``, else ``SchedulerConfig``'s."""
    return inputs.max_num_batched_tokens or inputs.vllm.scheduler_max_num_batched_tokens


def concurrent_batches(inputs: GeometryInputs) -> int:
    """``VllmConfig.max_concurrent_batches``: on vLLM's CPU platform one batch
    (``CpuPlatform.check_and_update_config`` turns async scheduling off)."""
    return B.CPU_CONCURRENT_BATCHES if inputs.capability_family == B.CPU_FAMILY else inputs.vllm.max_concurrent_batches


def in_flight_tokens(inputs: GeometryInputs) -> int:
    """The tokens scheduled but not yet freed (``VllmConfig.max_in_flight_tokens``) for ``inputs``."""
    return concurrent_batches(inputs) * batched_tokens(inputs)


def cache_block_size(plan: Plan, overlay: bool) -> int:
    """``cache_config.block_size`` as ``EngineCore._initialize_kv_caches`` leaves it: the smallest block
    of the prefix-cacheable groups (all groups when none is); the overlay's patch 0002 leaves the groups
    of drafter layers only out of it."""
    owners = {r.name: r.owner for r in plan.layers}
    kept = [
        g.block_size
        for g in plan.groups
        if g.kind.prefix_cacheable and not (overlay and all(owners.get(n) is Role.DRAFTER for n in g.layer_names))
    ]
    return min(kept or [g.block_size for g in plan.groups])


def scheduling(
    plan: Plan, inputs: GeometryInputs, speculating: bool, num_spec: int, behaviour: Behaviour
) -> Scheduling:
    """What the scheduler splits and allocates a prefill of ``plan`` by (``speculating``: the plan has a
    speculative config, ``num_spec`` tokens; ``behaviour``: the report's)."""
    pc = plan.prefix_cache
    return Scheduling(
        max_model_len=max_model_len_of(inputs),
        batched_tokens=batched_tokens(inputs),
        batches_in_flight=concurrent_batches(inputs),
        lookahead=lookahead_tokens(speculating, num_spec),
        cache_block=cache_block_size(plan, behaviour is Behaviour.OVERLAY),
        scheduler_block=pc.scheduler_block_size,
        hash_block=pc.hash_block_size,
        hit_alignment=pc.hit_alignment_tokens,
    )


def plan_speculation(inputs: GeometryInputs) -> dict[str, tuple[bool, int]]:
    """Per plan label, (a speculative config, num_speculative_tokens) as the plan runs vLLM."""
    n = inputs.num_speculative_tokens
    return {
        "with_drafter": (inputs.has_drafter or n > 0, n),
        "target_only_same_spec": (n > 0, n),
        "without_drafter": (False, 0),
    }


def max_model_len_of(inputs: GeometryInputs) -> int:
    """max_model_len as vLLM runs it: the flag, else the target's max_position_embeddings."""
    return inputs.target.max_model_len(inputs.max_model_len)
