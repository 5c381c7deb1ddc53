"""The import rules of pyproject.toml's [tool.importlinter], checked by import-linter (`lint-imports`).

The tree keeps every contract; and a copy of the tree with one import against a rule breaks the
contract that states the rule (imports inside functions count: they hide a cycle or a layer breach
from the interpreter until the function runs, but not from a reader).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from support.repo import REPO

PACKAGES = ("geometry", "overlay", "stackbuild", "tools")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = {
    c["id"]: c["name"]
    for c in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
}


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_tree_keeps_every_contract():
    run = lint_imports(REPO)
    assert run.returncode == 0, run.stdout[-4000:]
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in run.stdout
    assert set(CONTRACTS) >= {"pipeline", "public-api", "image-side", "geometry-stages", "acyclic"}


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


BREACHES = [
    # (module, appended text, the contract that breaks)
    ("geometry/verdict/gate.py", "def f():\n    import stackbuild.core.errors\n", "image-side"),
    ("overlay/apply.py", "from stackbuild import cli\n", "image-side"),
    ("stackbuild/core/gate.py", "from stackbuild.image import plan\n", "pipeline"),
    ("stackbuild/image/plan.py", "from stackbuild.serve.compose import x\n", "pipeline"),
    ("stackbuild/serve/compose.py", "def f():\n    from stackbuild.image import render\n", "pipeline"),
    ("stackbuild/image/plan.py", "from stackbuild.cli import main\n", "pipeline"),
    ("geometry/kv/backends.py", "def f():\n    import tools.doc_sections\n", "pipeline"),
    ("overlay/apply.py", "from tools import cli_reference\n", "pipeline"),
    ("stackbuild/command_exits.py", "def f():\n    from stackbuild.cli.image import render\n", "pipeline"),
    ("stackbuild/__init__.py", "import stackbuild.image.plan\nimport stackbuild.serve.compose\n", "package-face"),
    ("stackbuild/core/gate.py", "from geometry.plan.simulate import simulate\n", "public-api"),
    ("stackbuild/serve/pin.py", "def f():\n    from geometry.preflight import checked\n", "public-api"),
    ("geometry/kv/backends.py", "def f():\n    from geometry.plan import simulate\n", "geometry-stages"),
    ("geometry/model/inputs.py", "def f():\n    from geometry.verdict.gate import judge\n", "geometry-stages"),
    ("geometry/errors.py", "from geometry import vllm_versions\n", "geometry-stages"),
    # A circle inside one stage: a module-level import one way, a function-level one back.
    ("geometry/plan/prefix_cache.py", "def f():\n    from geometry.plan import report\n", "acyclic"),
    ("stackbuild/core/recipe/load.py", "def f():\n    from stackbuild.core import gate\n", "acyclic"),
]


@pytest.mark.parametrize("module,text,contract", BREACHES, ids=[f"{c}:{m}" for m, _, c in BREACHES])
def test_an_import_against_a_rule_breaks_its_contract(tree_copy, module, text, contract):
    path = tree_copy / module
    kept = path.read_text()
    try:
        path.write_text(kept + "\n" + text)
        run = lint_imports(tree_copy)
    finally:
        path.write_text(kept)
    assert run.returncode != 0
    broken = [name for name in CONTRACTS.values() if f"{name} BROKEN" in " ".join(run.stdout.split())]
    assert CONTRACTS[contract] in broken, run.stdout[-4000:]
