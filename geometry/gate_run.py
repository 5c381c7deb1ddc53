"""The geometry gate, start to end: what every caller runs (stdlib only, plus vLLM for the cross-check).

``run_gate(inputs, cross_check=...)``: the model configs checked
(model_config.check_configs), the simulator run, its report judged with the
serving limits (gate.judge), and, when asked, the simulator held to vLLM's own
planner for the same inputs (geometry/oracle) or to vLLM's recorded answer for
this very tree (geometry/record.py). Its callers: the in-image build gate
(gate_main), the host's recipe gate (stackbuild/core/gate.py: ``geometry``,
``compose``, ``build --dry-run``) and the start-time pre-flight
(preflight/check.py, in the image and on the host).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from . import gate, model_config
from . import record as record_mod
from .inputs import GeometryInputs
from .report import GeometryReport
from .simulate import simulate

# The geometry code the oracle records are keyed by (record.code_digest).
CODE_DIR = os.path.dirname(os.path.abspath(__file__))
RECORD_SOURCE = "record"
IMPORTED_SOURCE = "imported vLLM"


@dataclass(frozen=True)
class CrossCheck:
    """How the simulator is held to vLLM.

    ``installed_behaviour``: the installed vLLM's ("stock" or "overlay"); the
    simulator's model of that behaviour is compared (None: the inputs' own).
    ``recorded``: vLLM's recorded answer for this vLLM tree and input (record.py;
    vLLM is then not imported). Otherwise vLLM is imported and, with
    ``record_to``, its answer written there, keyed by ``record_key_input`` (the
    gate input as read) and ``patched_modules_imported``.
    ``only_if_passed``: skip it when the verdict already fails.
    """

    installed_behaviour: str | None = None
    recorded: Mapping | None = None
    record_to: str | None = None
    record_key_input: Mapping | None = None
    patched_modules_imported: tuple[str, ...] = ()
    only_if_passed: bool = False


@dataclass(frozen=True)
class OracleOutcome:
    source: str  # RECORD_SOURCE or IMPORTED_SOURCE
    behaviour: str  # the vLLM behaviour the simulator modelled for the comparison
    differences: tuple[str, ...]  # field by field; empty: they agree
    failure: str | None = None  # the installed vLLM could not plan at all ("TypeError: ...")

    @property
    def agrees(self) -> bool:
        return not self.differences and self.failure is None


@dataclass(frozen=True)
class GateRun:
    inputs: GeometryInputs
    report: GeometryReport
    verdict: gate.Verdict
    oracle: OracleOutcome | None  # None: no cross-check asked, or skipped (``only_if_passed``)


def run_gate(inputs: GeometryInputs, *, cross_check: CrossCheck | None = None) -> GateRun:
    """The gate's whole sequence on ``inputs``; BadInput (ConfigInvalid included) for what it does not model."""
    model_config.check_configs(inputs.target_config, inputs.drafter_config)
    report = simulate(inputs)
    verdict = gate.judge(report, inputs)
    oracle = None
    if cross_check is not None and (verdict.passed or not cross_check.only_if_passed):
        oracle = _cross_check(inputs, report, cross_check)
    return GateRun(inputs=inputs, report=report, verdict=verdict, oracle=oracle)


def _cross_check(inputs: GeometryInputs, report: GeometryReport, how: CrossCheck) -> OracleOutcome:
    behaviour = how.installed_behaviour or inputs.vllm_behaviour
    modelled = report if behaviour == inputs.vllm_behaviour else simulate(inputs.replace(vllm_behaviour=behaviour))
    if how.recorded is not None:
        diffs = record_mod.compare(record_mod.comparable(modelled), how.recorded["vllm"])
        return OracleOutcome(source=RECORD_SOURCE, behaviour=behaviour, differences=tuple(diffs))
    try:
        from . import oracle  # imports vLLM

        planned = oracle.plan_with_vllm(inputs)
        diffs = oracle.compare_reports(modelled, planned)
    except Exception as exc:  # noqa: BLE001 - the installed vLLM could not plan at all
        return OracleOutcome(
            source=IMPORTED_SOURCE, behaviour=behaviour, differences=(), failure=f"{type(exc).__name__}: {exc}"
        )
    if how.record_to:
        key = record_mod.environment_key(how.record_key_input, CODE_DIR, record_mod.imported_distributions())
        record_mod.write(record_mod.make_record(key, planned, how.patched_modules_imported), how.record_to)
    return OracleOutcome(source=IMPORTED_SOURCE, behaviour=behaviour, differences=tuple(diffs))
