"""Requests at once for one plan, one workload and one pool (stdlib only): the together model
(together.py) given what the plan and the inputs say the scheduler runs by.

The pool is the plan's blocks, or ``--num-gpu-blocks-override``'s: vLLM's planner replaces the block
count it computed from the memory with the override (``may_override_num_blocks`` in
vllm/v1/core/kv_cache_planning.py), the layout and the groups unchanged. ``--kv-cache-memory-bytes``
replaces the memory the worker measured (``Worker.determine_available_memory``): it is the gate
input's ``kv_cache_memory_bytes``, which the plan divides by its bytes per block.

``max_num_seqs``: the gate input's, else what ``vllm serve`` picks (``EngineArgs.get_batch_defaults``):
128 per rank on vLLM's CPU platform; on a GPU 1,024 where the serve default batch is at least 8,192
tokens (GPUs of 70 GiB and more), else 256.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geometry.image_contract import Behaviour
from geometry.kv import backends as B
from geometry.model.inputs import GeometryInputs
from geometry.plan.limits import TooMuchToStep, prefill_steps_reason
from geometry.plan.report import Plan
from geometry.plan.scheduler_settings import NULL_BLOCKS, plan_speculation, scheduling
from geometry.plan.together import Run, requests_at_once, run
from geometry.plan.together_state import Stepping, Workload

CPU_MAX_NUM_SEQS = 128  # per rank
GPU_MAX_NUM_SEQS = (8_192, 1_024, 256)  # (serve batch at least this, then, else)


def max_num_seqs(inputs: GeometryInputs) -> int:
    """``max_num_seqs`` as ``vllm serve`` runs the inputs (see the module docstring)."""
    if inputs.max_num_seqs is not None:
        return inputs.max_num_seqs
    if inputs.capability_family == B.CPU_FAMILY:
        return CPU_MAX_NUM_SEQS * inputs.tensor_parallel_size
    batched, large, small = GPU_MAX_NUM_SEQS
    return large if (inputs.max_num_batched_tokens or 0) >= batched else small


@dataclass(frozen=True)
class AtOnce:
    """Requests at once for one plan and one workload."""

    work: Workload
    num_blocks: int  # the pool, null block included
    requests: int | None  # None: vLLM cannot plan
    run: Run | None  # the run of ``requests`` sent together
    over: Run | None  # the run of one more (what stops the count: a preemption, or one left waiting)
    alone: Run | None = None  # one request run to its end: what it holds after its prefill and decoding

    @property
    def stopped_by(self) -> str:
        """Why one more does not all run."""
        if self.over is None:
            return "max_num_seqs"
        if self.over.preempted_at is not None:
            return f"a preemption at step {self.over.preempted_at:,}"
        return f"{self.over.sent - self.over.peak_running:,} left waiting"


def _stepped(plan: Plan, inputs: GeometryInputs, label: str, behaviour: Behaviour, num_blocks: int | None):
    """``(plan on the pool, groups, Scheduling, Stepping, free blocks)``, or None when vLLM cannot plan."""
    if num_blocks is not None and plan.num_blocks is not None:
        plan = replace(plan, num_blocks=num_blocks)
    if plan.error or plan.num_blocks is None or plan.prefix_cache is None or not plan.groups:
        return None
    groups = tuple(g.per_request for g in plan.groups)
    if any(g is None for g in groups):
        return None
    speculating, num_spec = plan_speculation(inputs)[label]
    s = scheduling(plan, inputs, speculating, num_spec, behaviour)
    st = Stepping(max_num_seqs(inputs), num_spec, s.batches_in_flight > 1)
    return plan, groups, s, st, max(plan.num_blocks - NULL_BLOCKS, 0)


def at_once(
    plan: Plan,
    inputs: GeometryInputs,
    label: str,
    work: Workload,
    behaviour: Behaviour,
    num_blocks: int | None = None,
    stepped: bool = False,
    start: int = 1,
    alone: bool = True,
) -> AtOnce:
    """Requests of ``work`` at once in ``plan`` as ``behaviour`` runs it, on ``num_blocks`` blocks
    (``--num-gpu-blocks-override``; None: the plan's); ``stepped``: every request stepped one step at a
    time (together.run: the same count, slower); ``start``: where the search for the count starts (a guess,
    the same count); ``alone``: with one request's run to its end (what it holds)."""
    planned = _stepped(plan, inputs, label, behaviour, num_blocks)
    if planned is None:
        return AtOnce(work, num_blocks or plan.num_blocks or 0, None, None, None)
    plan, groups, s, st, free = planned
    reason = prefill_steps_reason(work.prompt + 1, s.batched_tokens)
    if reason:
        raise TooMuchToStep(reason)
    n, last, over = requests_at_once(groups, s, st, free, work, stepped, start)
    one = run(groups, s, st, free, work, 1, to_the_end=True, stepped=stepped) if alone else None
    return AtOnce(work, plan.num_blocks, n, last, over, one)


def sent_together(
    plan: Plan,
    inputs: GeometryInputs,
    work: Workload,
    behaviour: Behaviour,
    sent: int,
    num_blocks: int | None = None,
) -> Run | None:
    """The with-drafter run of ``sent`` requests of ``work`` sent together, to their end (None: vLLM cannot
    plan): what a server given the same requests shows."""
    stepped = _stepped(plan, inputs, "with_drafter", behaviour, num_blocks)
    if stepped is None:
        return None
    _, groups, s, st, free = stepped
    return run(groups, s, st, free, work, sent, to_the_end=True)
