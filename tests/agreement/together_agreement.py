"""Requests sent together: the gate's count (geometry/plan/at_once.py) against vLLM's own scheduler
(tests/support/oracle_together.py), for the cases below; run as a script by
tests/agreement/test_together_agreement.py in a subprocess whose vLLM is the pristine tree of the newest
release whose CPU platform is modelled (stock), or a patched copy of it (the overlay):

    python tests/agreement/together_agreement.py stock|overlay

prints one ``TOGETHER {json}`` line per case (``VLLM {path}`` first) and exits 0.

Each case: the gate input, the plan (with the drafter), a pool (``--num-gpu-blocks-override``, None:
the plan's), a prompt and an output length. Compared: the count (the largest N whose N requests sent
together all run at once without a preemption, counting up from one), and for the runs of N and of
N + 1, each run to its end, how many ran together, the longest stretch of steps they all ran (what
`qualify --capacity` weighs the server's polls against) and whether and at which step one was
preempted; and what one request sent alone holds after its prefill and at most while it decodes.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE.parent)]

# The CPU hybrid recipe's shape (tests/recipes/cpu-hybrid-dflash) served with --max-model-len 8192 and
# --max-num-batched-tokens 2048 (the live test's flags), pools small enough that a few requests fill them.
HYBRID_LEN = 8192
HYBRID_BATCHED = 2048
# (pool, prompt, output): one left waiting, a preemption mid-prefill, a preemption while decoding, and
# counts the hold after the prefill alone would put higher or lower.
HYBRID_FIXED = [(150, 3000, 64), (250, 6000, 200), (200, 1000, 300), (120, 6000, 2000), (300, 500, 1000)]


def hybrid_sampled(seed: int = 44, n: int = 6) -> list[tuple[int, int, int]]:
    """Pools, prompts and outputs drawn at random (a fixed seed): pools from just above what vLLM needs to
    start at max_model_len 8192 (one request of that length) up."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = rnd.randint(300, 7000)
        out.append((rnd.randint(100, 320), prompt, rnd.randint(1, min(600, HYBRID_LEN - prompt))))
    return out


def cases(behaviour: str) -> dict[str, tuple[dict, int | None, int, int]]:
    """name -> (gate input, pool, prompt, output)."""
    import cpu_hybrid_cases as H
    from geometry_cases import prefix_caching
    from support.release_trees import newest_cpu_modelled_release

    from stackbuild.core.gate import gate_input
    from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

    # vLLM's scheduler runs here on its CPU platform: the newest release whose CPU platform is modelled.
    cpu_release = newest_cpu_modelled_release()
    out = {}
    # The overlay: the 2-head drafter only. With the recipe's 4-head drafter the patched 0.33.0 tree plans
    # this CPU shape as stock does (a count of 4 where the gate's overlay plan gives 2 at pool 150,
    # 3000+64): a planning difference on vLLM's CPU platform the requests-at-once model does not decide.
    for kv in (4, 2) if behaviour == "stock" else (2,):
        raw = H.gate_input(
            kv,
            behaviour=behaviour,
            version=cpu_release,
            max_model_len=HYBRID_LEN,
            max_num_batched_tokens=HYBRID_BATCHED,
        )
        for pool, prompt, output in HYBRID_FIXED + hybrid_sampled():
            out[f"cpu hybrid kv{kv} pool {pool} {prompt}+{output}"] = (raw, pool, prompt, output)
    # The default recipe (GB300: async scheduling, 16,384 batched tokens) at 128K, a small pool; prefix
    # caching off (mamba "none") and on ("align": state blocks freed as the processed tokens pass them).
    recipe = dict(gate_input(load_recipe(DEFAULT_RECIPE), vllm_behaviour=behaviour).to_json(), vllm_version=cpu_release)
    for on in (False, True):
        raw = dict(recipe, max_model_len=131072, **prefix_caching(on))
        out[f"default recipe prefix {'on' if on else 'off'} pool 300 20000+200"] = (raw, 300, 20000, 200)
    return out


RUN_FIELDS = ("sent", "peak_running", "preempted_at", "all_ran", "peak_steps")
ALONE_FIELDS = ("after_prefill_blocks", "decode_blocks")


def gate_side(raw: dict, pool: int | None, prompt: int, output: int) -> dict:
    from dataclasses import asdict

    from geometry.model.inputs import GeometryInputs
    from geometry.plan.at_once import at_once, sent_together
    from geometry.plan.simulate import simulate
    from geometry.plan.together_state import Workload
    from geometry.verdict.together_report import row

    inputs = GeometryInputs.from_json(raw)
    report = simulate(inputs)
    work = Workload(prompt, output)
    got = at_once(report.with_drafter, inputs, "with_drafter", work, report.behaviour, pool)
    # The runs of N and N + 1 to their end, as vLLM's scheduler runs them (the search's own runs stop once
    # what the requests can still hold is known to fit).
    sent = [r.sent for r in (got.run, got.over) if r is not None]
    runs = [sent_together(report.with_drafter, inputs, work, report.behaviour, k, pool) for k in sent]
    runs = [dict(asdict(r), all_ran=r.all_ran) for r in runs]
    line = row(report, inputs, work, pool)
    return {
        "requests": got.requests,
        "runs": [{k: r[k] for k in RUN_FIELDS} for r in runs],
        "alone": {k: getattr(got.alone, k) for k in ALONE_FIELDS},
        "after_prefill_requests": line.after_prefill_requests,
    }


def vllm_side(raw: dict, pool: int | None, prompt: int, output: int) -> dict:
    from support.oracle_together import requests_at_once

    from geometry.model.inputs import GeometryInputs

    inputs = GeometryInputs.from_json(raw)
    counted = requests_at_once(inputs, inputs.has_drafter, inputs.num_speculative_tokens, prompt, output, pool)
    runs = counted["runs"]
    return {
        "requests": counted["requests"],
        "runs": [{k: r[k] for k in RUN_FIELDS} for r in runs[-2:]],
        "alone": {k: runs[0][k] for k in ALONE_FIELDS},
    }


def compare(name: str, case: tuple) -> dict:
    gate, vllm = gate_side(*case), vllm_side(*case)
    agree = all(gate[k] == vllm[k] for k in ("requests", "runs", "alone"))
    return {"name": name, "gate": gate, "vllm": vllm, "agree": agree}


def main(behaviour: str) -> int:
    import os

    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm

    print("VLLM " + vllm.__file__, flush=True)
    for name, case in cases(behaviour).items():
        print("TOGETHER " + json.dumps(compare(name, case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
