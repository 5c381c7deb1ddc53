"""The stack recipe: one YAML file that describes one image.

Paths inside a recipe are relative to the recipe file. Loading checks the
shape (unknown keys, types, required keys) and then the rules that make a
recipe servable (drafter block vs speculative tokens, kernels vs GPU,
platform vs hardware). Every failure is a :class:`RecipeError` naming the
file and the key path.

The package: ``values`` (the frozen dataclasses), ``files`` (the readers of the
recipe's YAML, config snapshots and series lock), ``rules`` (one check per
section) and ``load`` (:func:`load_recipe`). Import its names from here.
"""

from __future__ import annotations

from stackbuild.core.recipe.files import MAX_CONFIG_BYTES, config_path
from stackbuild.core.recipe.hardware import CAPABILITY_RE, HARDWARE_FACTS, PLATFORM_RE
from stackbuild.core.recipe.load import load_recipe
from stackbuild.core.recipe.rules import (
    ENV_NAME_RE,
    MAX_BLOCK_SIZE,
    MAX_KV_CACHE_GIB,
    MAX_NGRAM,
    MAX_TENSOR_PARALLEL,
    NAME_RE,
    REVISION_RE,
    SAMPLE_OWNER,
    SECRET_NAME_RE,
    SERIES_RE,
    SHA256_HEX_RE,
    TAG_FIELDS,
    TAG_RE,
    check_repository,
)
from stackbuild.core.recipe.values import (
    DEFAULT_RECIPE,
    OVERLAY_SERIES_DIR,
    REPO_ROOT,
    SPECULATION_METHODS,
    UNAME_MACHINE,
    BaseImage,
    Drafter,
    Geometry,
    Hardware,
    ImageSpec,
    Model,
    Overlay,
    QualifyExpectations,
    Recipe,
    Serving,
    Speculation,
)

__all__ = [
    "BaseImage",
    "CAPABILITY_RE",
    "DEFAULT_RECIPE",
    "Drafter",
    "ENV_NAME_RE",
    "Geometry",
    "HARDWARE_FACTS",
    "Hardware",
    "ImageSpec",
    "MAX_BLOCK_SIZE",
    "MAX_CONFIG_BYTES",
    "MAX_KV_CACHE_GIB",
    "MAX_NGRAM",
    "MAX_TENSOR_PARALLEL",
    "Model",
    "NAME_RE",
    "OVERLAY_SERIES_DIR",
    "Overlay",
    "PLATFORM_RE",
    "QualifyExpectations",
    "REPO_ROOT",
    "REVISION_RE",
    "Recipe",
    "SAMPLE_OWNER",
    "SECRET_NAME_RE",
    "SERIES_RE",
    "SHA256_HEX_RE",
    "SPECULATION_METHODS",
    "Serving",
    "Speculation",
    "TAG_FIELDS",
    "TAG_RE",
    "UNAME_MACHINE",
    "check_repository",
    "config_path",
    "load_recipe",
]
