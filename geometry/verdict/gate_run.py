"""The geometry gate, start to end: what every caller runs (stdlib only, plus vLLM for the cross-check).

``run_gate(inputs, cross_check=...)``: the simulator run on inputs whose configs were checked as
they were read (GeometryInputs), its report judged with the
serving limits (gate.judge), and, when asked, the simulator held to vLLM's own
planner for the same inputs (geometry/oracle) or to vLLM's recorded answer for
this very tree (geometry/oracle/record.py). Its callers: the in-image build gate
(gate_main), the host's recipe gate (stackbuild/core/gate.py: ``geometry``,
``compose``, ``build --dry-run``) and the start-time pre-flight
(preflight/check.py, in the image and on the host).
"""

from __future__ import annotations

from dataclasses import dataclass

from geometry.model.inputs import GeometryInputs
from geometry.oracle.cross_check import CrossCheck, OracleOutcome, compare_with_vllm
from geometry.plan.report import GeometryReport
from geometry.plan.simulate import simulate
from geometry.verdict import gate


@dataclass(frozen=True)
class GateRun:
    inputs: GeometryInputs
    report: GeometryReport
    verdict: gate.Verdict
    oracle: OracleOutcome | None  # None: no cross-check asked, or skipped (``only_if_passed``)


def run_gate(inputs: GeometryInputs, *, cross_check: CrossCheck | None = None) -> GateRun:
    """The gate's whole sequence on ``inputs``; BadInput (ConfigInvalid included) for what it does not model."""
    report = simulate(inputs)
    installed = cross_check and cross_check.installed_behaviour
    modelled = simulate(inputs, behaviour=installed) if installed and installed != inputs.vllm_behaviour else report
    verdict = gate.judge(report, inputs)
    oracle = None
    if cross_check is not None and (verdict.passed or not cross_check.only_if_passed):
        oracle = compare_with_vllm(inputs, modelled, cross_check)
    return GateRun(inputs=inputs, report=report, verdict=verdict, oracle=oracle)
