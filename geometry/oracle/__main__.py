"""``python -m geometry.oracle --engine-core CASES``: one ``OVERLAY_PLAN {json}``
line (``engine_core_summary``) per case, planned by the imported vLLM's engine core."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from .engine_core import engine_core_summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m geometry.oracle",
                                 description="Plan with the imported vLLM's engine core.")
    ap.add_argument("--engine-core", required=True, metavar="CASES",
                    help="a JSON object or list of objects (keys of ENGINE_CORE_DEFAULTS)")
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    logging.basicConfig(level=logging.INFO)
    try:
        cases = json.loads(args.engine_core)
    except ValueError as exc:
        ap.error(f"--engine-core: not JSON: {exc}")
    for case in cases if isinstance(cases, list) else [cases]:
        print("OVERLAY_PLAN " + json.dumps(engine_core_summary(case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
