"""Copies of the default recipe, edited per test, in a temporary directory."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

import yaml
from support.repo import REPO

DEFAULT_RECIPE_DIR = REPO / "recipes" / "glm53-flash-dflash2-gb300"
# A well-formed digest for tests that need a pinned base and never pull it.
TEST_DIGEST = "sha256:" + "ab" * 32


def copy_recipe(tmp_path: Path, edit: Callable[[dict], Any] | None = None, *, raw: str | None = None) -> Path:
    """Copy the default recipe dir to tmp_path, apply ``edit`` to its YAML data."""
    target = tmp_path / "recipe"
    shutil.copytree(DEFAULT_RECIPE_DIR, target, ignore=shutil.ignore_patterns("recipe.lock.json"))
    path = target / "recipe.yaml"
    if raw is not None:
        path.write_text(raw)
        return path
    data = yaml.safe_load(path.read_text())
    if edit is not None:
        edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def pinned(data: dict) -> None:
    data["base"]["digest"] = TEST_DIGEST


def set_key(path: str, value):
    """An edit that sets the dotted ``path`` of the recipe data to ``value``."""

    def edit(data):
        node = data
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        node[last] = value

    return edit


def delete_key(path: str):
    """An edit that deletes the dotted ``path`` of the recipe data."""

    def edit(data):
        node = data
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        del node[last]

    return edit
