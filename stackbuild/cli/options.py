"""The options several commands share: the recipe, --json, the image's owner and repository."""

from __future__ import annotations

from pathlib import Path

import click

from stackbuild.core.recipe import DEFAULT_RECIPE

recipe_option = click.option(
    "--recipe",
    "recipe_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_RECIPE,
    show_default=str(DEFAULT_RECIPE.relative_to(DEFAULT_RECIPE.parents[2])),
    help="Stack recipe (YAML) to work from.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")


def _checked_owner(ctx, param, value):
    """--owner or IMAGE_OWNER, refused (exit 2) naming which one gave it, with the namespace it probably means."""
    if value is None:
        return None
    from click.core import ParameterSource

    from stackbuild.core.naming import OWNER_FROM_ENVIRONMENT, check_owner

    from_env = ctx.get_parameter_source(param.name) == ParameterSource.ENVIRONMENT
    return check_owner(value, OWNER_FROM_ENVIRONMENT if from_env else "--owner")


owner_option = click.option(
    "--owner",
    envvar="IMAGE_OWNER",
    callback=_checked_owner,
    help="Registry namespace for {owner} in image.repository and image.source (env IMAGE_OWNER).",
)


def repository_option(what: str):
    """--repository, its help saying what this command does with it."""
    return click.option(
        "--repository",
        help=f"{what} this repository instead of the recipe's image.repository (e.g. 127.0.0.1:5000/me/glm).",
    )
