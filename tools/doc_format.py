"""How the generated sections write numbers, tables and the gate's verdicts (tools/doc_sections.py)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from tools/ (the section modules import this one first)
    sys.path.insert(0, str(REPO))

from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.verdict.gate_run import run_gate  # noqa: E402
from stackbuild.core.gate import GIB  # noqa: E402

BEHAVIOURS = ("stock", "overlay")


def _n(value: int) -> str:
    return f"{value:,}"


def _gib(memory_bytes: int) -> str:
    gib = memory_bytes / GIB
    return f"{gib:g} GiB"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    return [_row(*header), _row(*("---",) * len(header)), *(_row(*r) for r in rows)]


def _geometry(gate: dict, behaviour: str):
    run = run_gate(GeometryInputs.from_json(dict(gate, vllm_behaviour=behaviour)))
    return run.report, run.verdict


def _one(values: set, what: str):
    (value,) = values or {None}
    if len(values) > 1:
        raise ValueError(f"{what}: more than one value {sorted(values)}")
    return value


def _verdict_word(verdict, bold: bool = False) -> str:
    word = "PASS" if verdict.passed else "FAIL"
    return f"**{word}**" if bold else word
