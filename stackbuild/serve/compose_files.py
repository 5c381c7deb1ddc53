"""`build.py compose`: the files that serve a recipe with `docker compose up`: one compose file for a
one-node recipe (compose.py), one file per node role for a recipe served across machines (multinode.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from stackbuild.core.errors import OutputError
from stackbuild.core.recipe import Recipe
from stackbuild.serve.compose import write_compose
from stackbuild.serve.multinode import write_role_files


def write_compose_files(
    recipe: Recipe,
    *,
    output: Optional[Path] = None,
    owner: Optional[str] = None,
    repository: Optional[str] = None,
    models_dir: Optional[str] = None,
    port: Optional[int] = None,
    gpus: Optional[str] = None,
    digest: Optional[str] = None,
    baseline: bool = False,
) -> dict:
    """The recipe's compose file (``baseline``: the one without speculation, a one-node recipe's), or its
    node roles' files into the directory ``output`` names (-o)."""
    if recipe.serving.nodes > 1:
        return write_role_files(
            recipe,
            output_dir=output,
            owner=owner,
            repository=repository,
            models_dir=models_dir,
            port=port,
            gpus=gpus,
            digest=digest,
        )
    if output is not None and output.is_dir():  # an output path (exit 15), not a usage error
        raise OutputError(f"-o {output}: is a directory; a one-node recipe writes one compose file: give its file name")
    return write_compose(
        recipe,
        output=output,
        owner=owner,
        repository=repository,
        models_dir=models_dir,
        port=port,
        gpus=gpus,
        digest=digest,
        baseline=baseline,
    )


def written_paths(result: dict) -> list[str]:
    """The files a result of :func:`write_compose_files` says were written (one per role, or the one)."""
    return list(result["paths"].values()) if "paths" in result else [result["path"]]
