"""The simulator held to vLLM: to vLLM's recorded answer for this very tree (geometry/oracle/record.py) or
to vLLM's own planner, imported (geometry/oracle) (stdlib only, plus vLLM for the import).

``compare_with_vllm(inputs, modelled, how)`` compares ``modelled``, the simulator's report for the
behaviour the installed vLLM has, and says where they differ (:class:`OracleOutcome`)."""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass
from typing import Mapping

from geometry.image_contract import Behaviour
from geometry.model.inputs import GeometryInputs
from geometry.oracle import record as record_mod
from geometry.plan.report import GeometryReport

# Where the gate's code is (record.code_digest hashes what the gate imports under it): the directory
# holding geometry/, the payload root in the image.
CODE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD_SOURCE = "record"
IMPORTED_SOURCE = "imported vLLM"


@dataclass(frozen=True)
class CrossCheck:
    """How the simulator is held to vLLM.

    ``installed_behaviour``: the installed vLLM's; the
    simulator's model of that behaviour is compared (None: the inputs' own).
    ``recorded``: vLLM's recorded answer for this vLLM tree and input (record.py;
    vLLM is then not imported). Otherwise vLLM is imported and, with
    ``record_to``, its answer written there, keyed by ``record_key_input`` (the
    gate input as read) and ``patched_modules_imported``.
    ``only_if_passed``: skip it when the verdict already fails.
    """

    installed_behaviour: Behaviour | None = None
    recorded: Mapping | None = None
    record_to: str | None = None
    record_key_input: Mapping | None = None
    patched_modules_imported: tuple[str, ...] = ()
    only_if_passed: bool = False


@dataclass(frozen=True)
class OracleOutcome:
    source: str  # RECORD_SOURCE or IMPORTED_SOURCE
    behaviour: Behaviour  # the vLLM behaviour the simulator modelled for the comparison
    differences: tuple[str, ...]  # field by field; empty: they agree
    failure: str | None = None  # the installed vLLM could not plan at all ("TypeError: ...")

    @property
    def agrees(self) -> bool:
        return not self.differences and self.failure is None


@contextlib.contextmanager
def _stdout_to_stderr():
    """Whatever vLLM and torch print while vLLM plans goes to stderr, at the file-descriptor level (gloo's C++
    prints on stdout when the oracle's one-rank group forms): a caller's stdout carries its report alone."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout to keep clean
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def compare_with_vllm(inputs: GeometryInputs, modelled: GeometryReport, how: CrossCheck) -> OracleOutcome:
    """``modelled`` (the simulator's report for ``modelled.behaviour``) against vLLM's plan of ``inputs``."""
    if how.recorded is not None:
        diffs = record_mod.compare(record_mod.comparable(modelled), how.recorded["vllm"])
        return OracleOutcome(source=RECORD_SOURCE, behaviour=modelled.behaviour, differences=tuple(diffs))
    try:
        with _stdout_to_stderr():
            from geometry.oracle.plan import compare_reports, plan_with_vllm  # imports vLLM

            planned = plan_with_vllm(inputs)
        diffs = compare_reports(modelled, planned)
    except Exception as exc:  # noqa: BLE001 - the installed vLLM could not plan at all
        return OracleOutcome(
            source=IMPORTED_SOURCE, behaviour=modelled.behaviour, differences=(), failure=f"{type(exc).__name__}: {exc}"
        )
    if how.record_to:
        key = record_mod.environment_key(how.record_key_input, CODE_ROOT, record_mod.imported_distributions())
        record_mod.write(record_mod.make_record(key, planned, how.patched_modules_imported), how.record_to)
    return OracleOutcome(source=IMPORTED_SOURCE, behaviour=modelled.behaviour, differences=tuple(diffs))
