"""The simulator and vLLM's own planner on one gate input, field by field: what the agreement tests
compare (tests/agreement/). vLLM is imported by the planner's call, not here."""

from __future__ import annotations

import os

import pytest
import refusal_reasons as R

from geometry.errors import BadInput
from geometry.model.inputs import GeometryInputs
from geometry.oracle.plan import compare_reports, plan_with_vllm
from geometry.plan.simulate import simulate

# The behaviour the agreement runs (a patched vLLM tree on PYTHONPATH: overlay), and the seeded sample of
# generated scenarios it plans (GEOMETRY_ORACLE_N draws, GEOMETRY_ORACLE_SEED).
BEHAVIOUR = os.environ.get("GEOMETRY_ORACLE_BEHAVIOUR", "stock")
N = int(os.environ.get("GEOMETRY_ORACLE_N", "300"))
SEED = int(os.environ.get("GEOMETRY_ORACLE_SEED", "20261130"))


def agree(data: dict) -> tuple:
    """(simulator, vLLM, differences) for a case the simulator plans (a refusal here fails), the drafter's
    backend included: the simulator's model of vLLM's choice against the one vLLM's own selector made, where
    the drafter loaded on both sides. A plan both refuse agrees only when both refuse it for the same reason
    (refusal_reasons.py maps vLLM's message and the simulator's to what each refuses for)."""
    inputs = GeometryInputs.from_json(dict(data, vllm_behaviour=BEHAVIOUR))
    try:
        sim = simulate(inputs)
    except BadInput as exc:
        pytest.fail(f"the simulator refuses a case given as planned: {exc}")
    vllm = plan_with_vllm(inputs)
    diffs = compare_reports(sim, vllm)
    for label in ("with_drafter", "without_drafter", "target_only_same_spec"):
        sim_error, vllm_error = getattr(sim, label).error, getattr(vllm, label).error
        if sim_error and vllm_error:
            diffs += tuple(R.differences(label, sim_error, vllm_error))
    if not sim.with_drafter.error and not vllm.with_drafter.error and sim.drafter_backend != vllm.drafter_backend:
        diffs += (f"drafter_backend: simulator={sim.drafter_backend!r} vllm={vllm.drafter_backend!r}",)
    return sim, vllm, diffs
