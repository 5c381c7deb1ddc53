#!/usr/bin/env python3
"""Benchmark of the start-time pre-flight's fast path (not a test).

What the image's entrypoint adds before it execs `vllm serve` when the argv and the
mounted configs are the ones the build checked: a fresh ``python3`` reading the
build's record, hashing the two config.json and reading the (synthetic) checkpoints' headers,
laid out as in the image (payload directory with geometry/preflight/ and the record; models
under a directory). Reported as the
median wall time of --runs fresh processes, next to a bare ``python3 -c pass`` on the
same machine; target: well under a second (< 0.3 s added).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import geometry
from geometry.image_contract import PREFLIGHT_CHECKED
from geometry.preflight import checked as checked_mod
from stackbuild.core.gate import gate_input
from stackbuild.core.preflight_record import checked_serve
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from models_support import drafter_files, target_files  # noqa: E402  (the tests' synthetic checkpoint)

TARGET_ADDED_S = 0.3
# The entrypoint's fast path with the models read from MODELS instead of /models: like
# preflight/entrypoint.py in the image, it finds geometry/ in the payload directory (argv[1]).
FAST_PATH = """import sys
sys.path.insert(0, sys.argv[1])
from geometry.preflight.run import preflight
from geometry.preflight.checked import load
c = load(sys.argv[1] + "/preflight-checked.json")
o = preflight(c.argv, checked=c, checked_path="", overlay_manifest=None,
              locate=lambda p: p.replace("/models", sys.argv[2], 1))
sys.exit(o.code)
"""


def _median_run(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", help="write the JSON result here")
    args = ap.parse_args(argv)

    recipe = load_recipe(DEFAULT_RECIPE)
    with tempfile.TemporaryDirectory(prefix="preflight-bench-") as tmp:
        payload, models = Path(tmp) / "payload", Path(tmp) / "models"
        shutil.copytree(
            Path(geometry.__file__).parent, payload / "geometry", ignore=shutil.ignore_patterns("__pycache__")
        )
        checked = checked_serve(recipe, gate_input(recipe))
        checked_mod.write(checked, str(payload / PREFLIGHT_CHECKED))
        for model, files in ((recipe.target, target_files()), (recipe.drafter, drafter_files())):
            directory = models / model.path.removeprefix("/models/")
            directory.mkdir(parents=True)
            shutil.copyfile(recipe.directory / model.config, directory / "config.json")
            for name, data in files.items():  # a whole (tiny) checkpoint: its headers are read
                (directory / name).write_bytes(data)
        python = sys.executable
        bare = _median_run([python, "-c", "pass"], args.runs)
        fast = _median_run([python, "-c", FAST_PATH, str(payload), str(models)], args.runs)
    result = {
        "preflight_fast_path": {
            "python": python,
            "runs": args.runs,
            "median_s": round(fast, 4),
            "bare_python_median_s": round(bare, 4),
            "added_s": round(fast - bare, 4),
            "target_added_s": TARGET_ADDED_S,
            "meets_target": fast - bare < TARGET_ADDED_S,
        }
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
