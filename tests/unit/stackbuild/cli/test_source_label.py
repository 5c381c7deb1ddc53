"""org.opencontainers.image.source tells the truth: image.source with {owner} filled, or the
checkout's git remote (https form) when the recipe gives none; a placeholder is refused at push."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from recipe_copies import copy_recipe, delete_key, pinned, set_key
from support.repo import REPO

from stackbuild.core.labels import OCI_SOURCE
from stackbuild.core.naming import https_form


def build_py(*args: str, checkout: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(checkout / "build.py"), *args], capture_output=True, text=True, cwd=checkout, timeout=300
    )


def source_label(recipe: Path, *args: str, checkout: Path = REPO) -> str:
    done = build_py("build", "--dry-run", "--json", "--recipe", str(recipe), *args, checkout=checkout)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["labels"][OCI_SOURCE]


def test_the_default_recipes_name_their_source_with_the_owner():
    for recipe in sorted((REPO / "recipes").glob("*/recipe.yaml")):
        assert "source: https://github.com/{owner}/glm53-dflash2-images\n" in recipe.read_text(), recipe


def test_owner_fills_the_source(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    assert source_label(recipe, "--owner", "acme") == "https://github.com/acme/glm53-dflash2-images"
    rendered = build_py("render", "--recipe", str(recipe), "--owner", "acme")
    assert f'{OCI_SOURCE}="https://github.com/acme/glm53-dflash2-images"' in rendered.stdout


@pytest.mark.parametrize(
    "remote, url",
    [
        ("git@github.com:acme/glm53-dflash2-images.git", "https://github.com/acme/glm53-dflash2-images"),
        (
            "https://someone:secret@github.com/acme/glm53-dflash2-images.git",
            "https://github.com/acme/glm53-dflash2-images",
        ),
        ("ssh://git@git.example.com:2222/team/images", "https://git.example.com/team/images"),
        ("/srv/git/images", ""),  # a path on this machine names no public repository
    ],
)
def test_the_https_form_of_a_remote(remote, url):
    assert https_form(remote) == url


def test_without_image_source_the_git_remote_is_the_source(tmp_path):
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(checkout)], check=True, timeout=120)
    subprocess.run(
        ["git", "-C", str(checkout), "remote", "set-url", "origin", "git@github.com:acme/glm53-dflash2-images.git"],
        check=True,
    )
    recipe = copy_recipe(tmp_path, lambda d: (delete_key("image.source")(d), pinned(d)))
    assert source_label(recipe, checkout=checkout) == "https://github.com/acme/glm53-dflash2-images"


@pytest.mark.parametrize(
    "source, placeholder",
    [
        ("https://github.com/{owner}/glm53-dflash2-images", "{owner}"),  # no owner to fill it with
        ("https://github.com/OWNER/glm53-dflash2-images", "OWNER"),
    ],
)
def test_a_placeholder_is_refused_at_push(tmp_path, source, placeholder):
    recipe = copy_recipe(tmp_path, lambda d: (set_key("image.source", source)(d), pinned(d)))
    for command in (["build", "--dry-run", "--push"], ["push"]):
        done = build_py(*command, "--recipe", str(recipe), "--repository", "127.0.0.1:5000/acme/glm")
        assert done.returncode == 2, (command, done.stderr)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"error: {recipe}: image.source: {source} still holds the placeholder {placeholder}")
    # Without a push the label says what it is, and the build goes on.
    assert source_label(recipe, "--repository", "127.0.0.1:5000/acme/glm") == source
