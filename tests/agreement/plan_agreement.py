"""The simulator and vLLM's own planner on one gate input, field by field: what the agreement tests
compare (tests/agreement/). vLLM's planning code is imported by the planner's call, not here; only its
version is read here, so that the agreement runs against whichever release is importable."""

from __future__ import annotations

import os

import pytest

from geometry.errors import BadInput
from geometry.model.inputs import GeometryInputs
from geometry.oracle.plan import compare_reports, plan_with_vllm
from geometry.plan.simulate import simulate
from geometry.vllm_versions import public_version

# The behaviour the agreement runs (a patched vLLM tree on PYTHONPATH: overlay), and the seeded sample of
# generated scenarios it plans (GEOMETRY_ORACLE_N draws, GEOMETRY_ORACLE_SEED).
BEHAVIOUR = os.environ.get("GEOMETRY_ORACLE_BEHAVIOUR", "stock")
N = int(os.environ.get("GEOMETRY_ORACLE_N", "300"))
SEED = int(os.environ.get("GEOMETRY_ORACLE_SEED", "20261130"))


def imported_vllm_version() -> str:
    """The release of the vLLM this process imports (its ``vllm.version``; PYTHONPATH may put another
    release's tree before the venv's): the release every agreement case is a gate input for."""
    from vllm.version import __version__

    return public_version(__version__)


def inputs(data: dict) -> GeometryInputs:
    """``data`` as a gate input for the imported release and the agreement's behaviour."""
    return GeometryInputs.from_json(dict(data, vllm_behaviour=BEHAVIOUR, vllm_version=imported_vllm_version()))


def agree(data: dict) -> tuple:
    """(simulator, vLLM, differences) for a case the simulator plans (a refusal here fails), the drafter's
    backend included: the simulator's model of vLLM's choice against the one vLLM's own selector made, where
    the drafter loaded on both sides. A plan both refuse agrees only when both refuse it for the same reason
    (geometry/oracle/refusals.py reads vLLM's message and the simulator's)."""
    case = inputs(data)
    try:
        sim = simulate(case)
    except BadInput as exc:
        pytest.fail(f"the simulator refuses a case given as planned: {exc}")
    vllm = plan_with_vllm(case)
    diffs = compare_reports(sim, vllm)
    if not sim.with_drafter.error and not vllm.with_drafter.error and sim.drafter_backend != vllm.drafter_backend:
        diffs += (f"drafter_backend: simulator={sim.drafter_backend!r} vllm={vllm.drafter_backend!r}",)
    return sim, vllm, diffs
