"""The default recipe's requests at once, the figures the gate report, README.md and docs/gate.md give
(the together model at the default lengths, with the drafter), against vLLM 0.34.0's own scheduler:
tests/agreement/together_figures.py in a subprocess whose vLLM is the pristine tree (stock) or a copy
patched with the overlay's series. For the gate's count N, vLLM's scheduler runs N requests sent
together (all run) and N + 1 (not all: a preemption, or one left waiting).
"""

from __future__ import annotations

import json
import subprocess

import default_recipe_figures as F
import pytest
from infra.fixtures import in_ci

pytestmark = pytest.mark.oracle

try:
    import torch  # noqa: F401
except ImportError as exc:
    if in_ci():
        raise
    pytest.skip(f"torch is not importable ({exc}): run `make oracle`", allow_module_level=True)

from overlay_helpers import REPO, copy_tree, oracle_python, pristine_dir, run_apply  # noqa: E402
from support.release_trees import tree_env  # noqa: E402


def _run(behaviour: str, site) -> list[dict]:
    proc = subprocess.run(
        [oracle_python(), str(REPO / "tests" / "agreement" / "together_figures.py"), behaviour],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=tree_env(site),
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    lines = [line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("VLLM ", "FIGURE "))]
    assert dict(lines)["VLLM"].startswith(str(site))
    return [json.loads(value) for key, value in lines if key == "FIGURE"]


@pytest.fixture(scope="module")
def stock_figures():
    return _run("stock", pristine_dir())


@pytest.fixture(scope="module")
def overlay_figures(tmp_path_factory):
    site = copy_tree(pristine_dir(), tmp_path_factory.mktemp("patched") / "site")
    done = run_apply("--site-packages", site)
    assert done.returncode == 0, done.stderr
    return _run("overlay", site)


@pytest.mark.parametrize("i", range(len(F.TOGETHER_LENGTHS)))
def test_stock_figures_are_what_vllms_scheduler_runs(stock_figures, i):
    row = stock_figures[i]
    assert ((row["prompt"], row["output"]), row["gate"]) == (F.TOGETHER_LENGTHS[i], F.TOGETHER_STOCK[i])
    assert row["agree"], json.dumps(row, indent=1)


@pytest.mark.parametrize("i", range(len(F.TOGETHER_LENGTHS)))
def test_overlay_figures_are_what_the_patched_scheduler_runs(overlay_figures, i):
    row = overlay_figures[i]
    assert ((row["prompt"], row["output"]), row["gate"]) == (F.TOGETHER_LENGTHS[i], F.TOGETHER_OVERLAY[i])
    assert row["agree"], json.dumps(row, indent=1)
