#!/usr/bin/env python3
"""The CI matrix: one entry per recipe under recipes/, with the GitHub-hosted runner native to its platform.

Prints ``matrix=<json>`` for $GITHUB_OUTPUT; a recipe whose platform has no
native runner is one ``error:`` line and the recipe error's exit code.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stackbuild.errors import RecipeError, StackBuildError  # noqa: E402
from stackbuild.recipe import load_recipe  # noqa: E402

# GitHub-hosted runners that build each platform natively (no emulation).
NATIVE_RUNNERS = {"linux/amd64": "ubuntu-24.04", "linux/arm64": "ubuntu-24.04-arm"}


def matrix(root: Path = ROOT) -> dict:
    include = []
    for path in sorted((root / "recipes").glob("*/recipe.yaml")):
        recipe = load_recipe(path)
        runner = NATIVE_RUNNERS.get(recipe.platform)
        if runner is None:
            raise RecipeError(path, "platform", f"no native GitHub-hosted runner for {recipe.platform} "
                                                f"(known: {', '.join(sorted(NATIVE_RUNNERS))})")
        include.append({"recipe": path.relative_to(root).as_posix(), "name": recipe.name,
                        "platform": recipe.platform, "runner": runner})
    return {"include": include}


def main() -> int:
    try:
        print(f"matrix={json.dumps(matrix(), sort_keys=True)}")
    except StackBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
