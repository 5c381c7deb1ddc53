"""`build.py compose`: the files that serve a recipe with `docker compose up`: one compose file for a
one-node recipe (compose.py), one file per node role for a recipe served across machines (multinode.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from stackbuild.core.errors import OutputError
from stackbuild.core.recipe import Recipe
from stackbuild.serve.compose import write_compose
from stackbuild.serve.multinode import check_role_options, write_role_files
from stackbuild.serve.target import ServeTarget


def check_compose_options(recipe: Recipe, output: Optional[Path], port: Optional[int]) -> None:
    """What `compose` refuses before the image is resolved: a multi-node recipe's --port or an -o that is no
    directory; a one-node recipe's -o that is a directory."""
    if recipe.serving.nodes > 1:
        check_role_options(output, port)
    elif output is not None and output.is_dir():  # an output path (exit 15), not a usage error
        raise OutputError(f"-o {output}: is a directory; a one-node recipe writes one compose file: give its file name")


def write_compose_files(target: ServeTarget, *, output: Optional[Path] = None, baseline: bool = False) -> dict:
    """The target's compose file (``baseline``: the one without speculation, a one-node recipe's), or its
    node roles' files into the directory ``output`` names (-o)."""
    check_compose_options(target.recipe, output, target.port)
    if target.recipe.serving.nodes > 1:
        return write_role_files(target, output_dir=output)
    return write_compose(target, output=output, baseline=baseline)


def written_paths(result: dict) -> list[str]:
    """The files a result of :func:`write_compose_files` says were written (one per role, or the one)."""
    return list(result["paths"].values()) if "paths" in result else [result["path"]]
