"""What `make port` found for one vLLM release: the port of the series, whether the gate models the
release, the agreement on the scenario matrix; its outcome (the exit code) and how it is printed.

The outcome is the first that holds, in this order: the series needs hand work (a hunk needs fuzz or
fails, or a file is missing), the gate has no entry for the release (``geometry/vllm_versions.py``),
the simulator and the release's own planning differ on a scenario, the oracle cannot plan a scenario
with the release's code, else the series applies clean (every hunk at its line or at an offset the
port renumbers) and the gate agrees on every scenario.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Optional


@enum.unique
class PortExit(enum.IntEnum):
    """The exit code of `python -m tools.port_release` (make port): one per outcome."""

    label: str
    meaning: str

    def __new__(cls, number: int, label: str, meaning: str) -> "PortExit":
        member = int.__new__(cls, number)
        member._value_ = number
        member.label = label
        member.meaning = meaning
        return member

    APPLIES_CLEAN = (
        0,
        "applies clean",
        "every hunk of the series applies to the release (at its line, or at an offset the port renumbers) "
        "and the gate agrees with the release's own planning on every scenario, stock and patched",
    )
    HAND_WORK = (
        1,
        "needs hand work",
        "a hunk needs fuzz or fails, or a file it patches is gone: the report names the patch, file and hunk; "
        "nothing is planned",
    )
    USAGE = (2, "usage", "the command line: an unknown or missing flag")
    BAD_INPUT = (
        3,
        "bad input",
        "the release cannot be had or read (no such version on the index, no network, a wheel without its "
        "dist-info) or the series is unreadable: one line naming it",
    )
    NOT_MODELLED = (
        4,
        "not modelled",
        "the series applies, but the gate has no entry for the release (geometry/vllm_versions.py) or does not "
        "model it on a GPU: nothing to hold its planning to",
    )
    GATE_DISAGREES = (
        5,
        "gate disagrees",
        "the simulator and the release's own planning differ: the report names each scenario and figure",
    )
    ORACLE_FAILED = (
        6,
        "oracle cannot plan",
        "vLLM's planning, driven by geometry/oracle, raised on the release's code for a scenario (the oracle "
        "needs work for the release): the report names the scenario and the exception",
    )


@dataclass(frozen=True)
class ScenarioResult:
    """One scenario planned by the simulator and by the release's code."""

    name: str  # "<recipe>: <variant>"
    behaviour: str  # "stock" (the pristine tree) or "overlay" (the tree with the series)
    differences: tuple = ()  # compare_reports' lines, e.g. "with_drafter.block_size: simulator=1 vllm=2"
    oracle_error: Optional[str] = None  # the exception vLLM's planning raised, and where
    vllm_gate_passes: Optional[bool] = None  # the gate's verdict on vLLM's own plan

    @property
    def agrees(self) -> bool:
        return not self.differences and self.oracle_error is None


@dataclass(frozen=True)
class PortReport:
    version: str
    wheel: str
    series: str  # the series ported (its directory name)
    hunks: tuple  # tools.port_series.HunkReport, in series order
    staged: Optional[str] = None  # the ported series, when it applies
    written: Optional[str] = None  # overlay/series/vllm-VERSION, when asked to write it
    not_modelled: Optional[str] = None  # why the gate cannot hold the release to anything
    scenarios: tuple = field(default=())  # ScenarioResult

    @property
    def applies(self) -> bool:
        return all(h.applies for h in self.hunks)

    @property
    def outcome(self) -> PortExit:
        if not self.applies:
            return PortExit.HAND_WORK
        if self.not_modelled:
            return PortExit.NOT_MODELLED
        if any(s.differences for s in self.scenarios):
            return PortExit.GATE_DISAGREES
        if any(s.oracle_error for s in self.scenarios):
            return PortExit.ORACLE_FAILED
        return PortExit.APPLIES_CLEAN

    def to_json(self) -> dict:
        outcome = self.outcome
        return {
            "version": self.version,
            "wheel": self.wheel,
            "series": self.series,
            "outcome": outcome.label,
            "exit_code": int(outcome),
            "port": {
                "applies": self.applies,
                "hunks": [dict(asdict(h), applies=h.applies) for h in self.hunks],
                "hand_work": [asdict(h) for h in self.hunks if not h.applies],
                "staged": self.staged,
                "written": self.written,
            },
            "modelled": self.not_modelled is None,
            "not_modelled": self.not_modelled,
            "agreement": {
                "run": bool(self.scenarios),
                "scenarios": [
                    dict(asdict(s), differences=list(s.differences), agrees=s.agrees) for s in self.scenarios
                ],
            },
        }

    def lines(self) -> list:
        """The report as text: the release, each hunk that needs hand work, each scenario that does not agree,
        a summary of the rest, and the outcome."""
        out = [f"vLLM {self.version} ({self.wheel}): series {self.series} ported"]
        moved = [h for h in self.hunks if h.applies and h.offset]
        failing = [h for h in self.hunks if not h.applies]
        if failing:
            out.append(f"port: {len(failing)} of {len(self.hunks)} hunks need hand work:")
            out += [f"  {h.line_text()}" for h in failing]
        else:
            out.append(f"port: all {len(self.hunks)} hunks apply ({len(moved)} at an offset, renumbered)")
            out.append(f"  staged: {self.staged}")
            if self.written:
                out.append(f"  written: {self.written}")
        out += [f"  {h.line_text()}" for h in moved]
        if failing:
            out.append("gate: not run (the series does not apply)")
        elif self.not_modelled:
            out.append(f"gate: not run: {self.not_modelled}")
        else:
            out += _agreement_lines(self.scenarios)
        outcome = self.outcome
        out.append(f"outcome: {outcome.label} (exit {int(outcome)})")
        return out


def _agreement_lines(scenarios) -> list:
    out = []
    agree = [s for s in scenarios if s.agrees]
    out.append(f"gate: agrees with vLLM's planning on {len(agree)} of {len(scenarios)} scenarios")
    for s in scenarios:
        where = f"  {s.name} [{s.behaviour}]"
        out += [f"{where}: differs: {d}" for d in s.differences]
        if s.oracle_error:
            out.append(f"{where}: the oracle cannot plan: {s.oracle_error}")
    for behaviour in ("stock", "overlay"):
        planned = [s for s in scenarios if s.behaviour == behaviour and s.vllm_gate_passes is not None]
        if planned:
            failing = [s.name for s in planned if not s.vllm_gate_passes]
            line = f"  {behaviour}: the gate passes vLLM's own plan in {len(planned) - len(failing)} of {len(planned)}"
            out.append(line + (f"; fails: {', '.join(failing)}" if failing and behaviour == "overlay" else ""))
    return out


def exit_code_table() -> str:
    """docs/overlay.md's table of `make port`'s exit codes (tools/doc_sections.py: port-exit-codes)."""
    rows = ["| exit | outcome | what it means |", "| --- | --- | --- |"]
    rows += [f"| {int(code)} | {code.label} | {code.meaning} |" for code in PortExit]
    return "\n".join(rows) + "\n"
