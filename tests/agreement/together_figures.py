"""The default recipe's requests at once (the gate report's figures: geometry/plan/together.py's count
at each default length, the length split by ``together.workload``) against vLLM's own scheduler
(tests/support/oracle_together.py); run as a script by tests/agreement/test_together_figures.py in a
subprocess whose vLLM is the pristine tree of the recipe's release (stock) or a patched copy (the
overlay):

    python tests/agreement/together_figures.py stock|overlay

prints one ``FIGURE {json}`` line per length (``VLLM {path}`` first) and exits 0. For the gate's count
N, vLLM's scheduler runs N requests sent together and N + 1 (a run that all ran says every smaller one
does): the count is vLLM's when N all ran and N + 1 did not (or N is max_num_seqs).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE.parent)]


def figures(behaviour: str) -> list[dict]:
    from support.oracle_together import send_together

    from geometry.image_contract import Behaviour
    from geometry.model.inputs import GeometryInputs
    from geometry.oracle.serving_platform import serving_platform
    from geometry.plan.at_once import max_num_seqs
    from geometry.plan.concurrency import concurrency
    from geometry.plan.simulate import simulate
    from stackbuild.core.gate import gate_input
    from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

    raw = gate_input(load_recipe(DEFAULT_RECIPE), vllm_behaviour=Behaviour(behaviour)).to_json()
    inputs = GeometryInputs.from_json(raw)
    report = simulate(inputs)
    table = concurrency(report, inputs)
    limit = max_num_seqs(inputs)
    out = []
    with serving_platform(inputs.capability_family, inputs.cpu_avx512_bf16):
        for fit in table.fits["with_drafter"]:
            n, work = fit.requests, fit.work
            sent = [n, n + 1] if n < limit else [n]
            runs = [
                send_together(inputs, True, inputs.num_speculative_tokens, work.prompt, work.output, k)
                for k in sent
                if k > 0
            ]
            agree = runs[0]["all_ran"] if n > 0 else True
            agree = agree and (n == limit or not runs[-1]["all_ran"])
            keep = ("sent", "peak_running", "preempted_at", "all_ran")
            out.append(
                {
                    "tokens": fit.tokens,
                    "prompt": work.prompt,
                    "output": work.output,
                    "gate": n,
                    "vllm_runs": [{k: r[k] for k in keep} for r in runs],
                    "agree": agree,
                }
            )
    return out


def main(behaviour: str) -> int:
    import os

    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm

    print("VLLM " + vllm.__file__, flush=True)
    for row in figures(behaviour):
        print("FIGURE " + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
