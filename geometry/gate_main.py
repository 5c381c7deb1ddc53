#!/usr/bin/env python3
"""In-image KV-geometry gate for a target and its DFlash drafter on the installed vLLM.

Usage (the payload root on PYTHONPATH; geometry/image_contract.py builds the
build's and verify's command lines):
  python3 -m geometry.gate_main --input gate-input.json [--oracle [--oracle-record PATH [--oracle-record-read-only]]]
      [--json] [--report-out PATH] [--behaviour auto|stock|overlay|input]
      [--overlay-manifest PATH] [--import-patched] [--verdict-failure-allowed]

Exit codes, entries of geometry/errors.py ExitCode: SUCCESS pass (or a failed
verdict with ``--verdict-failure-allowed``: the report says fail),
GATE_VERDICT_FAILED geometry mismatch, UNCHECKED oracle disagreement (simulator
vs the installed vLLM, or vLLM's recorded answer for this very tree: record.py),
BAD_INPUT (an unreadable oracle record or overlay manifest included, and
argparse's usage errors), PATCHED_MODULE_IMPORT (``--import-patched``).

Stdlib only, plus the image's own vLLM for ``--oracle``.

Behaviour: ``auto`` (default) reads the overlay manifest (default
/opt/glm53-overlay/manifest.json, written by overlay/apply.py --manifest,
read as overlay.manifest.OverlayManifest); the series counts as applied when the
manifest lists the draft-block-fit patch; see OVERLAY_CONTRACT.md. No manifest
-> ``stock``. ``stock``/``overlay`` force the mode; ``input`` uses the
``vllm_behaviour`` field of the gate input.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys

from geometry.errors import BadInput, ExitCode
from geometry.image_contract import (
    GATE_INPUT,
    GATE_REASON_PREFIX,
    OVERLAY_MANIFEST,
    Behaviour,
    GateReport,
    OracleCheck,
    payload_path,
)
from geometry.model import inputs as inputs_mod
from geometry.oracle import record as record_mod
from geometry.oracle.cross_check import CODE_ROOT, CrossCheck
from geometry.oracle.import_settings import apply_import_settings
from geometry.oracle.installed import import_patched, overlay_applied, patched_modules
from geometry.verdict import table
from geometry.verdict.gate_run import run_gate
from overlay.json_shape import read_json

DEFAULT_MANIFEST = payload_path(OVERLAY_MANIFEST)
# The exit code of an input the gate cannot read or the simulator does not model.
EXIT_BAD_INPUT = ExitCode.BAD_INPUT


def _oracle_from_record(path: str, raw: dict, code_root: str, modules: list[str] | None) -> tuple[dict | None, str]:
    """(the record, a note) when ``path`` holds vLLM's answer for this vLLM and these inputs, else (None, why not).

    ``modules``: the patched modules this run must see imported (None: no import
    check asked); a record made without importing them does not stand in for it.
    """
    if not os.path.exists(path):
        return None, f"no oracle record at {path}: planning with the installed vLLM"
    rec = record_mod.load(path)
    why = record_mod.stale_because(rec, raw, code_root)
    if why is None and modules is not None and rec.get("patched_modules_imported") != modules:
        why = "it was made without importing the patched modules " + ", ".join(modules)
    if why:
        return None, f"oracle record {path} not used ({why}): planning with the installed vLLM"
    return rec, (
        f"oracle: vLLM's recorded answer ({path}) is for this very vLLM tree, packages and input; "
        "vLLM not imported" + ("; the patched modules imported when it was made" if modules else "")
    )


def main(argv: list[str] | None = None) -> int:
    apply_import_settings()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", required=True, help=f"{GATE_INPUT} (GeometryInputs)")
    ap.add_argument("--oracle", action="store_true", help="also plan with the installed vLLM and require agreement")
    ap.add_argument(
        "--oracle-record",
        metavar="PATH",
        help="with --oracle: vLLM's recorded answer; used instead of importing vLLM when its key "
        "(input, geometry code, Python, vLLM tree, package versions) is this image's; "
        "otherwise vLLM is imported and a new record written here",
    )
    ap.add_argument(
        "--oracle-record-read-only",
        action="store_true",
        help="with --oracle-record: use the record when its key matches, never write one (verify's re-run)",
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    ap.add_argument("--report-out", help="write the JSON report here")
    ap.add_argument("--behaviour", default="auto", choices=("auto", *(b.value for b in Behaviour), "input"))
    ap.add_argument(
        "--verdict-failure-allowed",
        action="store_true",
        help="exit 0 when only the verdict failed (a stock comparison build); the report still says fail",
    )
    ap.add_argument("--overlay-manifest", default=DEFAULT_MANIFEST)
    ap.add_argument(
        "--import-patched",
        action="store_true",
        help=f"import every module the overlay manifest lists (exit {ExitCode.PATCHED_MODULE_IMPORT} if one fails); "
        "skipped when a matching oracle record says it was done for this very tree",
    )
    args = ap.parse_args(argv)
    if args.oracle_record and not args.oracle:
        ap.error("--oracle-record needs --oracle")
    if args.oracle_record_read_only and not args.oracle_record:
        ap.error("--oracle-record-read-only needs --oracle-record")

    try:
        raw = read_json(ValueError, args.input)
        inputs = inputs_mod.GeometryInputs.from_json(raw)
        note = None
        if args.behaviour == "auto":
            applied, note = overlay_applied(args.overlay_manifest)
            inputs = inputs.replace(vllm_behaviour=Behaviour.OVERLAY if applied else Behaviour.STOCK)
        elif args.behaviour in tuple(Behaviour):
            inputs = inputs.replace(vllm_behaviour=Behaviour(args.behaviour))
        wanted = patched_modules(args.overlay_manifest) if args.import_patched else None
        recorded, record_note = None, None
        if args.oracle_record:
            recorded, record_note = _oracle_from_record(args.oracle_record, raw, CODE_ROOT, wanted)
    except (OSError, ValueError, BadInput) as exc:  # RecordError, ContractError, ManifestError are ValueErrors
        print(f"{GATE_REASON_PREFIX}bad input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if record_note:
        print(record_note, file=sys.stderr)

    if wanted is not None and recorded is None:
        try:
            import_patched(wanted)
        except ImportError as exc:
            print(f"{GATE_REASON_PREFIX}{exc}", file=sys.stderr)
            return ExitCode.PATCHED_MODULE_IMPORT
        print(f"imported {len(wanted)} patched modules: {', '.join(wanted)}", file=sys.stderr)

    cross_check = None
    if args.oracle:
        cross_check = CrossCheck(
            recorded=recorded,
            record_to=None if recorded is not None or args.oracle_record_read_only else args.oracle_record,
            record_key_input=raw,
            patched_modules_imported=tuple(wanted or ()),
        )
    try:
        run = run_gate(inputs, cross_check=cross_check)
    except (ValueError, BadInput) as exc:  # a config or input the simulator does not model
        print(f"{GATE_REASON_PREFIX}bad input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report, verdict = run.report, run.verdict
    code = ExitCode.SUCCESS if verdict.passed else ExitCode.GATE_VERDICT_FAILED
    oracle_check = None
    if run.oracle is not None:
        o = run.oracle
        oracle_check = OracleCheck(
            agrees=o.agrees,
            source=o.source,
            differences=o.differences if o.failure is None else (f"oracle failed: {o.failure}",),
        )
        if not o.agrees:
            code = ExitCode.UNCHECKED
    if not verdict.passed:
        more = len(verdict.reasons) - 1
        print(
            f"{GATE_REASON_PREFIX}{verdict.reasons[0]}" + (f" (and {more} more reason(s) above)" if more else ""),
            file=sys.stderr,
        )
    elif code == ExitCode.UNCHECKED:
        print(
            f"{GATE_REASON_PREFIX}the oracle disagrees with the simulator: {oracle_check.differences[0]}"
            if oracle_check.differences
            else f"{GATE_REASON_PREFIX}the oracle disagrees with the simulator",
            file=sys.stderr,
        )
    simulated = table.to_json(report, verdict)
    out = GateReport(
        report=simulated["report"], verdict=simulated["verdict"], behaviour_source=note, oracle=oracle_check
    ).to_json()
    if args.report_out:
        # Compact: it is stored in an image layer and read by programs.
        with open(args.report_out, "w", encoding="utf-8") as fh:
            json.dump(out, fh, separators=(",", ":"), sort_keys=True, default=str)
            fh.write("\n")
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        if note:
            print(note)
        print(table.render_text(report, verdict))
        if args.oracle:
            if code == ExitCode.UNCHECKED:
                print(
                    "ORACLE DISAGREEMENT (simulator vs "
                    + ("vLLM's recorded answer):" if recorded else "installed vLLM):")
                )
                for d in oracle_check.differences:
                    print(f"  - {d}")
            else:
                print(
                    "oracle: "
                    + ("vLLM's recorded answer" if recorded else "the installed vLLM")
                    + " agrees field by field"
                )
    if code == ExitCode.GATE_VERDICT_FAILED and args.verdict_failure_allowed:
        print("verdict fail allowed (--verdict-failure-allowed): the image is kept for comparison", file=sys.stderr)
        return ExitCode.SUCCESS
    return code


if __name__ == "__main__":
    # A short-lived process whose time is, with --oracle, a cold import of vLLM and
    # torch: the cyclic collector finds next to nothing to free there and costs
    # 10-15% of that import.
    gc.disable()
    sys.exit(main())
