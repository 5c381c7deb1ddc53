"""What the host and the image agree on, in one place (stdlib only).

The template renderer, the build pipeline, ``verify``, the progress display, the
in-image gate and the start-time pre-flight all import this module:

- the payload root and each file under it (``PAYLOAD_DIR``, ``payload_path``);
- the gate's command line (``gate_argv``), run as a module with the payload on
  ``PYTHONPATH``;
- the Dockerfile's build steps, in order, named for people (``BUILD_STEPS``),
  and the exit status by which the patch step says the build runs on another
  machine than the recipe's (``ARCHITECTURE_MISMATCH_STATUS``);
- the gate report (``GateReport``, written by ``python3 -m geometry.gate_main``),
  read by ``from_json``, which rejects any other shape with one
  ``ContractError`` naming the file and the key at fault. The overlay manifest
  (``OverlayManifest``) is written by the patch step, before geometry/ is in the
  image: it is defined in overlay/manifest.py, next to its writer;
- the image's labels as the image itself holds them (``ImageLabels``, written by
  the render into the pre-flight payload, read by the start-time check's rank
  fingerprint: a container cannot read its own image's LABELs);
- the closed sets both sides and every stage share: ``Role`` (target, drafter)
  and ``Behaviour`` (stock vLLM or the overlay's), each member its string.

It ships in the image in the gate payload: the gate and the pre-flight import it.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping, Optional

from overlay.json_shape import exact_keys, json_object, read_json, strings, typed

from .errors import ExitCode


# ------------------------------------------------------------------ roles and behaviours
# Each member is its string (a str subclass): JSON documents, reports and messages hold the same text a plain
# string would give.
class _Text(str, enum.Enum):
    """A member formats as its value (``str()``, f-strings, ``json``)."""

    def __str__(self) -> str:
        return self.value


class Role(_Text):
    """Which model: the served target or the DFlash drafter that proposes its tokens."""

    TARGET = "target"
    DRAFTER = "drafter"


class Behaviour(_Text):
    """The vLLM the geometry is planned for: stock vLLM, or the overlay's patched tree."""

    STOCK = "stock"
    OVERLAY = "overlay"

    @classmethod
    def of_stock_flag(cls, stock: bool) -> Behaviour:
        """What a command's ``--stock`` flag selects: stock vLLM with it, else the overlay."""
        return cls.STOCK if stock else cls.OVERLAY


# ------------------------------------------------------------------ payload paths
PAYLOAD_DIR = "/opt/glm53-overlay"

# Under the payload root:
OVERLAY_APPLY = "overlay/apply.py"  # the applier of the patch series (patch payload)
OVERLAY_SERIES = "overlay/series"  # one directory per patch series (patch payload)
NORMALISE_MTIMES = "normalise-mtimes.sh"  # run at the end of each RUN step (patch payload)
OVERLAY_MANIFEST = "manifest.json"  # written by the patch step: what was patched
GATE_INPUT = "gate-input.json"  # the recipe's geometry, read by the gate (gate payload)
ORACLE_RECORD = "oracle-record.json"  # vLLM's recorded answer for this image (gate payload / gate step)
GATE_REPORT = "geometry-report.json"  # written by the gate step
PREFLIGHT_CHECKED = "preflight-checked.json"  # what the build checked, read at start (pre-flight payload)
IMAGE_LABELS = "image-labels.json"  # the labels the build sets on the image, read at start (pre-flight payload)
# The start-time check: a subpackage of geometry/ copied after the gate step (its edits do not
# re-run the gate; the gate imports none of it, so the oracle record's code digest leaves it out).
PREFLIGHT_PACKAGE = "geometry/preflight"
PREFLIGHT_ENTRYPOINT = f"{PREFLIGHT_PACKAGE}/entrypoint.py"  # the image's ENTRYPOINT (pre-flight payload)
GATE_SCRIPT = "geometry/sim_glm5_drafter_hades.py"  # the gate under the script name published images use


def payload_path(name: str, payload_dir: str = PAYLOAD_DIR) -> str:
    """The absolute path of ``name`` (one of the names above) under the payload root."""
    return f"{payload_dir.rstrip('/')}/{name}"


# ------------------------------------------------------------- the gate's argv
GATE_MODULE = "geometry.gate_main"
GATE_MODULE_PATH = GATE_MODULE.replace(".", "/") + ".py"  # its file under the payload root (gate payload)


def gate_argv(
    payload_dir: str = PAYLOAD_DIR,
    *,
    build: bool,
    behaviour: Behaviour = Behaviour.OVERLAY,
    failure_allowed: bool = False,
    import_vllm: bool = False,
) -> list[str]:
    """The in-image gate's command line.

    ``build``: the build's gate step (import every patched module, use or write
    the oracle record, write the gate report); otherwise ``verify``'s re-run
    (JSON on stdout, nothing written): it reads the oracle record the build left
    in the image, which stands in for importing vLLM when its key is the image's
    vLLM tree, packages and input, unless ``import_vllm``. ``behaviour`` stock: a build without the patch
    series (no manifest, nothing patched to import: the installed vLLM as it
    is). ``failure_allowed``: a failed verdict is written to the report and the
    step exits 0 (a disagreement with vLLM, or bad input, still fails it).
    """
    argv = [
        "env",
        f"PYTHONPATH={payload_dir}",
        "python3",
        "-m",
        GATE_MODULE,
        "--input",
        payload_path(GATE_INPUT, payload_dir),
        "--oracle",
    ]
    if build:
        argv += (
            ["--behaviour", Behaviour.STOCK.value]
            if behaviour is Behaviour.STOCK
            else ["--overlay-manifest", payload_path(OVERLAY_MANIFEST, payload_dir), "--import-patched"]
        )
        argv += [
            "--oracle-record",
            payload_path(ORACLE_RECORD, payload_dir),
            "--report-out",
            payload_path(GATE_REPORT, payload_dir),
        ]
        if failure_allowed:
            argv.append("--verdict-failure-allowed")
    else:
        if not import_vllm:
            argv += ["--oracle-record", payload_path(ORACLE_RECORD, payload_dir), "--oracle-record-read-only"]
        argv += ["--json"]
    return argv


# --------------------------------------------------------------- build steps
@dataclass(frozen=True)
class BuildStep:
    keyword: str  # the Dockerfile instruction
    name: str  # how progress and error messages call it


PATCH_STEP = "patch series"  # the architecture check first, then the series
GATE_STEP = "geometry gate"
BUILD_STEPS = (
    BuildStep("FROM", "base image"),
    BuildStep("COPY", "payload copy"),
    BuildStep("RUN", PATCH_STEP),
    BuildStep("RUN", GATE_STEP),
    BuildStep("ENV", "strict overlay"),
    BuildStep("ENTRYPOINT", "entrypoint"),
    BuildStep("LABEL", "labels"),
)

# The gate step says why it failed in one stderr line that starts with this (its first
# reason, a bad input, an oracle disagreement); the build's error line is that reason.
GATE_REASON_PREFIX = "geometry gate: "


def gate_reason(output_lines) -> Optional[str]:
    """The failed gate step's reason line (without the prefix), from the step's output; None if absent."""
    for line in output_lines:
        text = line.strip()
        if text.startswith(GATE_REASON_PREFIX):
            return text[len(GATE_REASON_PREFIX) :]
    return None


# The patch step first compares ``uname -m`` with the recipe's machine and, if they
# differ, prints one line and exits with this status, before anything is written;
# the build reports it as the architecture's failure. No program of that step exits
# with it otherwise (overlay/apply.py: 0, 1 or 2; the shell: 126, 127, 128 + signal).
ARCHITECTURE_MISMATCH_STATUS = ExitCode.ARCHITECTURE_STEP


def step_name(number: int) -> str:
    """The name of build step ``number`` (1-based, as the engine counts)."""
    if 1 <= number <= len(BUILD_STEPS):
        return BUILD_STEPS[number - 1].name
    return f"step {number}"


# ----------------------------------------------------------- typed documents
class ContractError(ValueError):
    """A document in the payload does not have the shape its writer writes."""


_object = partial(json_object, ContractError)
_keys = partial(exact_keys, ContractError)
_typed = partial(typed, ContractError)
_strings = partial(strings, ContractError)


ORACLE_SOURCES = ("record", "imported vLLM")


@dataclass(frozen=True)
class OracleCheck:
    """The gate's cross-check with vLLM's own planner."""

    agrees: bool
    differences: tuple[str, ...]
    source: str  # "record" (vLLM's recorded answer) or "imported vLLM"

    def to_json(self) -> dict:
        return {"agrees": self.agrees, "differences": list(self.differences), "source": self.source}

    @classmethod
    def from_json(cls, data: Any, where: str) -> "OracleCheck":
        data = _object(data, where)
        _keys(data, cls, where)
        source = _typed(data, "source", str, where)
        if source not in ORACLE_SOURCES:
            raise ContractError(f"{where}: source: {source!r} is not one of {', '.join(ORACLE_SOURCES)}")
        return cls(_typed(data, "agrees", bool, where), _strings(data, "differences", where), source)


@dataclass(frozen=True)
class GateReport:
    """The gate's report: the simulator's numbers, its verdict, and the oracle's cross-check."""

    report: Mapping[str, Any]  # the simulator's GeometryReport (geometry/plan/report.py) as JSON
    verdict: Mapping[str, Any]  # the gate's Verdict (geometry/verdict/gate.py) as JSON
    behaviour_source: Optional[str] = None  # how the vLLM behaviour was found (auto mode)
    oracle: Optional[OracleCheck] = None  # with --oracle

    @property
    def verdict_word(self) -> str:
        """``pass`` or ``fail``: the gate's geometry verdict (the oracle's agreement is ``oracle``)."""
        return "pass" if self.verdict["passed"] else "fail"

    def to_json(self) -> dict:
        data: dict[str, Any] = {"report": dict(self.report), "verdict": dict(self.verdict)}
        if self.behaviour_source is not None:
            data["behaviour_source"] = self.behaviour_source
        if self.oracle is not None:
            data["oracle"] = self.oracle.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any, where: str = GATE_REPORT) -> "GateReport":
        data = _object(data, where)
        _keys(data, cls, where, optional=("behaviour_source", "oracle"))
        verdict = _object(data["verdict"], f"{where}: verdict")
        if not isinstance(verdict.get("passed"), bool):
            raise ContractError(f"{where}: verdict: passed: expected true or false, got {verdict.get('passed')!r}")
        source = data.get("behaviour_source")
        if source is not None and not isinstance(source, str):
            raise ContractError(f"{where}: behaviour_source: unexpected {type(source).__name__}")
        oracle = OracleCheck.from_json(data["oracle"], f"{where}: oracle") if "oracle" in data else None
        return cls(dict(_object(data["report"], f"{where}: report")), dict(verdict), source, oracle)


@dataclass(frozen=True)
class ImageLabels:
    """The labels the build sets on the image (its LABEL instruction), written into the image as well.

    The one writer is the build's render (the same mapping as the LABEL line); the reader is the
    start-time check, whose rank fingerprint compares them between the nodes of a group. Keys and
    values are what stackbuild/core/labels.py names; nothing here reads a single key.
    """

    labels: Mapping[str, str]

    def to_json(self) -> dict:
        return {"labels": dict(sorted(self.labels.items()))}

    @classmethod
    def from_json(cls, data: Any, where: str = IMAGE_LABELS) -> "ImageLabels":
        data = _object(data, where)
        _keys(data, cls, where)
        labels = _object(data["labels"], f"{where}: labels")
        for key, value in labels.items():
            if not isinstance(value, str):
                raise ContractError(f"{where}: labels: {key}: expected a string, got {type(value).__name__}")
        return cls(dict(labels))


def read_image_labels(path: str) -> Optional[ImageLabels]:
    """The image's labels at ``path``; None when there is no such file (a host, or no build wrote it)."""
    if not os.path.lexists(path):
        return None
    return ImageLabels.from_json(read_json(ContractError, path), path)
