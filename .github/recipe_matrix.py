#!/usr/bin/env python3
"""The CI matrices: the recipes under recipes/, their platforms on native GitHub-hosted runners.

Prints three lines for $GITHUB_OUTPUT: ``matrix=<json>``, one entry per
recipe and platform with the runner native to it (the images are built
there); ``recipes=<json>``, one entry per recipe (the host-side checks); and
``indexes=<json>``, one entry per multi-platform recipe (the job that puts
the image index over its platforms' images), with ``has_indexes`` saying
whether there is any. A platform without a native runner is one ``error:``
line and the recipe error's exit code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from stackbuild.core.errors import RecipeError, StackBuildError
from stackbuild.core.recipe import load_recipe

ROOT = Path(__file__).resolve().parent.parent

# GitHub-hosted runners that build each platform natively (no emulation).
NATIVE_RUNNERS = {"linux/amd64": "ubuntu-24.04", "linux/arm64": "ubuntu-24.04-arm"}


def matrix(root: Path = ROOT) -> dict:
    include = []
    for path in sorted((root / "recipes").glob("*/recipe.yaml")):
        recipe = load_recipe(path)
        for index, platform in enumerate(recipe.platforms):
            runner = NATIVE_RUNNERS.get(platform)
            if runner is None:
                key = "platform" if len(recipe.platforms) == 1 else f"platforms[{index}]"
                raise RecipeError(
                    path,
                    key,
                    f"no native GitHub-hosted runner for {platform} (known: {', '.join(sorted(NATIVE_RUNNERS))})",
                )
            include.append(
                {
                    "recipe": path.relative_to(root).as_posix(),
                    "name": recipe.name,
                    "platform": platform,
                    "runner": runner,
                    "platforms": len(recipe.platforms),
                }
            )
    return {"include": include}


def recipes(builds: dict, multi_only: bool = False) -> dict:
    """One entry per recipe of the build matrix (with several platforms only, if ``multi_only``)."""
    seen = {}
    for entry in builds["include"]:
        if not multi_only or entry["platforms"] > 1:
            seen.setdefault(entry["recipe"], {"recipe": entry["recipe"], "name": entry["name"]})
    return {"include": list(seen.values())}


def main() -> int:
    try:
        builds = matrix()
        indexes = recipes(builds, multi_only=True)
        print(f"matrix={json.dumps(builds, sort_keys=True)}")
        print(f"recipes={json.dumps(recipes(builds), sort_keys=True)}")
        print(f"indexes={json.dumps(indexes, sort_keys=True)}")
        print(f"has_indexes={'true' if indexes['include'] else 'false'}")
    except StackBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
