"""``python -m support.engine_core_cli --engine-core CASES`` (``tests/`` on ``sys.path``): one ``OVERLAY_PLAN {json}``
line (``engine_core_summary``) per case, planned by the imported vLLM's engine core.

Every case is checked before the first is planned: a case that is not an object of
``ENGINE_CORE_DEFAULTS`` keys is a usage error (exit 2) naming the key, and nothing is printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from support.engine_core import BadEngineCoreCase, engine_core_parameters, engine_core_summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m support.engine_core_cli", description="Plan with the imported vLLM's engine core."
    )
    ap.add_argument(
        "--engine-core",
        required=True,
        metavar="CASES",
        help="a JSON object or list of objects (keys of ENGINE_CORE_DEFAULTS)",
    )
    args = ap.parse_args(argv)
    try:
        cases = json.loads(args.engine_core)
    except ValueError as exc:
        ap.error(f"--engine-core: not JSON: {exc}")
    cases = cases if isinstance(cases, list) else [cases]
    for i, case in enumerate(cases):
        try:
            engine_core_parameters(case)
        except BadEngineCoreCase as exc:
            ap.error(f"--engine-core case {i}: {exc}")
    # Keeps this process off any GPU (vLLM's CPU platform); the plan does not depend on
    # it: the engine core plans under the serving GPU's platform (serving_platform.py).
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    logging.basicConfig(level=logging.INFO)
    for case in cases:
        print("OVERLAY_PLAN " + json.dumps(engine_core_summary(case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
