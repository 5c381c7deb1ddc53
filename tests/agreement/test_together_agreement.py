"""Requests sent together: the gate's count equals what vLLM's own scheduler runs
(tests/agreement/together_agreement.py has the cases and the comparison), in subprocesses on vLLM's CPU
platform: stock on the pristine tree of the newest release whose CPU platform is modelled, the overlay on
a copy patched with that release's series; for the CPU hybrid recipe's
shape (drafter KV heads 4 and 2, small pools from --num-gpu-blocks-override, fixed and sampled
lengths) and the default recipe at 128K with prefix caching off and on.

Both counts are shown where they differ: the count the pool gives when each request keeps what its
prefill left it and never decodes (admission.py), and the count of requests sent together that run
at once (the definition); the cases include some where the decode phase lets more run (a request's
hold shrinks once it decodes: the drafter's sliding window, the mamba state blocks) and some where it
lets fewer (the full-attention blocks grow as it decodes, and one is preempted).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from infra.fixtures import in_ci

pytestmark = pytest.mark.oracle

try:
    import torch  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise
    pytest.skip(f"torch is not importable ({exc}): run `make oracle`", allow_module_level=True)

import together_agreement as A  # noqa: E402
from support.release_trees import newest_cpu_modelled_release, release_tree, tree_env  # noqa: E402

STOCK = A.cases("stock")


def _run(behaviour: str, site) -> dict:
    """together_agreement.py's rows for ``behaviour`` with ``site``'s vLLM first on the path."""
    from overlay_helpers import REPO, oracle_python

    env = tree_env(site)
    proc = subprocess.run(
        [oracle_python(), str(REPO / "tests" / "agreement" / "together_agreement.py"), behaviour],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=env,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    lines = [line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("VLLM ", "TOGETHER "))]
    assert dict(lines)["VLLM"].startswith(str(site))
    return {row["name"]: row for key, value in lines if key == "TOGETHER" for row in [json.loads(value)]}


@pytest.fixture(scope="module")
def stock_results():
    return _run("stock", release_tree(newest_cpu_modelled_release()))


@pytest.mark.parametrize("name", list(STOCK))
def test_stock_count_is_what_vllms_scheduler_runs(stock_results, name):
    result = stock_results[name]
    assert result["agree"], json.dumps(result, indent=1)


def test_the_cases_show_both_counts_differ_both_ways():
    """The decode phase changes the count in both directions among the cases: the count after the prefill
    alone is not the count of requests that run together."""
    rows = {name: A.gate_side(*case) for name, case in STOCK.items()}
    more = [n for n, r in rows.items() if r["requests"] > r["after_prefill_requests"]]
    fewer = [n for n, r in rows.items() if r["requests"] < r["after_prefill_requests"]]
    preempted = [n for n, r in rows.items() if r["runs"][-1]["preempted_at"] is not None]
    waiting = [n for n, r in rows.items() if r["runs"][-1]["preempted_at"] is None]
    assert more and fewer and preempted and waiting, rows


@pytest.fixture(scope="module")
def overlay_results(tmp_path_factory):
    from overlay_helpers import OVERLAY, copy_tree, run_apply

    release = newest_cpu_modelled_release()
    site = copy_tree(release_tree(release), tmp_path_factory.mktemp("patched") / "site")
    done = run_apply("--site-packages", site, "--series", OVERLAY / "series" / f"vllm-{release}")
    assert done.returncode == 0, done.stderr
    return _run("overlay", site)


@pytest.mark.parametrize("name", list(A.cases("overlay")))
def test_overlay_count_is_what_the_patched_scheduler_runs(overlay_results, name):
    result = overlay_results[name]
    assert result["agree"], json.dumps(result, indent=1)
