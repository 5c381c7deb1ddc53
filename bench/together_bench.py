#!/usr/bin/env python3
"""Benchmark of the requests-sent-together model (not a test): the default recipe's rows, stock and
overlay, at its default lengths (geometry/verdict/together_report.py's workloads), each counted with
steady decodes frozen (the gate's path) beside every request stepped one step at a time
(``stepped``): the same counts, and the time each takes.

Target: each row < 1 s of CPU time frozen.  Frozen rows: median of --repeats runs, wall and CPU
(process) time; stepped rows: one run each (--no-stepped leaves them out).  Prints JSON; --out also
writes it.

    python bench/together_bench.py [--repeats 3] [--no-stepped] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from timing import median_times

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from geometry.image_contract import Behaviour  # noqa: E402
from geometry.plan.at_once import at_once  # noqa: E402
from geometry.verdict.together_report import workloads  # noqa: E402
from stackbuild.core.gate import recipe_geometry  # noqa: E402
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe  # noqa: E402

ROW_TARGET_CPU_S = 1.0


def _count(got) -> dict:
    return {"requests": got.requests, "stopped_by": got.stopped_by if got.requests is not None else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-stepped", action="store_true", help="time the frozen rows only")
    ap.add_argument("--out")
    args = ap.parse_args()
    recipe = load_recipe(DEFAULT_RECIPE)
    rows = []
    for behaviour in Behaviour:
        run = recipe_geometry(recipe, vllm_behaviour=behaviour)
        plan = run.report.with_drafter
        for work in workloads(run.inputs):

            def count(stepped: bool, work=work):
                return at_once(plan, run.inputs, "with_drafter", work, behaviour, stepped=stepped)

            frozen, got = median_times(lambda: count(False), args.repeats)
            row = {"behaviour": behaviour.value, "prompt": work.prompt, "output": work.output, **_count(got)}
            row["frozen"] = dict(frozen, meets_target=frozen["cpu_s"] < ROW_TARGET_CPU_S)
            if not args.no_stepped:
                stepped, slow = median_times(lambda: count(True), 1)
                row["stepped"] = stepped
                row["same_count"] = _count(slow) == _count(got) and slow.run == got.run and slow.over == got.over
                row["stepped_over_frozen"] = round(stepped["cpu_s"] / max(frozen["cpu_s"], 1e-6), 1)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    out = {
        "recipe": DEFAULT_RECIPE.parent.name,
        "target_row_cpu_s": ROW_TARGET_CPU_S,
        "rows": rows,
        "meets_target": all(r["frozen"]["meets_target"] for r in rows),
        "same_counts": all(r.get("same_count", True) for r in rows),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
