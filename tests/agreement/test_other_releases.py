"""The agreement with vLLM's own planning code for the releases the venv does not hold: each CPU-plannable
release with a pristine tree (``make pristine-all``: the wheel's package directory and dist-info), put
first on PYTHONPATH in a fresh pytest of the plan, recipe and backend agreement modules. The venv's release runs
those modules in this session; together every modelled GPU release is held to its own code in CI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.release_trees import release_tree
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION, RELEASES

pytestmark = pytest.mark.oracle

# The releases vLLM's GPU planning code runs on this CPU for: modelled on a GPU, not the venv's.
OTHER = sorted(v for v, r in RELEASES.items() if r.gpu_modelled and v != DEFAULT_VERSION)
MODULES = (
    "tests/agreement/test_plan_agreement.py",
    "tests/agreement/test_recipe_agreement.py",
    "tests/agreement/test_backend_agreement.py",
)


@pytest.mark.parametrize("version", OTHER)
def test_the_agreement_holds_on_another_release(version, tmp_path):
    tree = release_tree(version)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(REPO)]))
    env.pop("TEST_TIMELINE", None)  # its tests are this test's time, not lines of this worker's timeline
    env.setdefault("GEOMETRY_ORACLE_N", "120")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-o", f"cache_dir={tmp_path}", *MODULES],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    tail = "\n".join(proc.stdout.splitlines()[-30:])
    assert proc.returncode == 0, tail
    assert " passed" in tail and " skipped" not in tail, tail
