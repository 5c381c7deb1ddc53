#!/usr/bin/env python3
"""Benchmark of `build.py fit`'s search (not a test), side by side with one
`geometry` run (simulate + gate + requests at once) of the same recipe.

Recipes: the default (GB300) and the 2x GB10 one without serving.block_size
(the search must find a block).  Target: one recipe's search < 2 s of wall time.
Median of --repeats runs, wall and CPU (process) time.  Prints JSON; --out also
writes it.

    python bench/fit_bench.py [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from timing import median_times

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from geometry.model.inputs import GeometryInputs  # noqa: E402
from geometry.plan.concurrency import concurrency  # noqa: E402
from geometry.verdict.fit import gate_verdict, search  # noqa: E402
from stackbuild.core.gate import gate_input  # noqa: E402
from stackbuild.core.recipe import load_recipe  # noqa: E402

SEARCH_TARGET_S = 2.0
RECIPES = {
    "glm53-flash-dflash2-gb300": {},
    "glm53-flash-dflash2-2x-gb10 without block_size": {"block_size": None},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    out = {"target_search_s": SEARCH_TARGET_S, "recipes": {}}
    for label, changes in RECIPES.items():
        name = label.split()[0]
        inputs = GeometryInputs.from_json(
            dict(gate_input(load_recipe(ROOT / "recipes" / name / "recipe.yaml")).to_json(), **changes)
        )

        def geometry_run():
            report, _verdict = gate_verdict(inputs)
            concurrency(report, inputs)

        result = search(inputs)
        row = {
            "geometry": median_times(geometry_run, args.repeats)[0],
            "fit": median_times(lambda: search(inputs), args.repeats)[0],
            "settings_tried": result.evaluated,
            "best_block_size": result.ranked[0].block_size if result.ranked else None,
        }
        row["fit_over_geometry"] = round(row["fit"]["wall_s"] / row["geometry"]["wall_s"], 1)
        row["meets_target"] = row["fit"]["wall_s"] < SEARCH_TARGET_S
        out["recipes"][label] = row
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
