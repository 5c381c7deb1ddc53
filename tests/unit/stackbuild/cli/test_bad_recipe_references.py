"""Every class of bad input is one line naming the file, key or flag, a documented exit code, nothing written:
recipe paths and names, image references and owners.

Each case breaks a copy of the default recipe (or its configs, or a command line) and runs ,
`build --dry-run` and `compose -o` on it (or the one command the case is about). Expected numbers are
worked out here by hand, not read from the code under test.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from bad_input_helpers import (
    assert_refused,
    invoke,
    run_everywhere,
    with_base_digest,
)
from recipe_copies import copy_recipe
from recipe_copies import set_key as _set
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION

# --- recipe paths and names ----------------------------------------------------------------------


def test_config_path_leaving_the_recipe_directory(tmp_path):
    recipe = copy_recipe(tmp_path, with_base_digest(_set("target.config", "../outside.json")))
    (recipe.parent.parent / "outside.json").write_text((recipe.parent / "configs" / "target.config.json").read_text())
    run_everywhere(tmp_path, recipe, 2, f"{recipe}: target.config: ../outside.json leaves the recipe's directory")


def test_absolute_config_path(tmp_path):
    absolute = str(REPO / "recipes" / "glm53-flash-dflash2-gb300" / "configs" / "target.config.json")
    recipe = copy_recipe(tmp_path, with_base_digest(_set("target.config", absolute)))
    run_everywhere(tmp_path, recipe, 2, f"{recipe}: target.config: must be relative to the recipe's directory")


RECIPE_PATHS = [
    (
        "series-traversal",
        "overlay.series",
        f"../series/vllm-{DEFAULT_VERSION}",
        "overlay.series: must be the name of a directory in overlay/series/",
    ),
    ("series-absolute", "overlay.series", "/etc", "overlay.series: must be the name of a directory"),
    ("name-traversal", "name", "../../compose/evil", "name: must be a safe file name"),
    ("name-with-slash", "name", "a/b", "name: must be a safe file name"),
    ("name-with-space", "name", "glm 53", "name: must be a safe file name"),
    ("name-hidden-file", "name", ".compose", "name: must be a safe file name"),
]


@pytest.mark.parametrize("name,key,value,message", RECIPE_PATHS, ids=[c[0] for c in RECIPE_PATHS])
def test_recipe_paths_and_names(tmp_path, name, key, value, message):
    recipe = copy_recipe(tmp_path, with_base_digest(_set(key, value)))
    run_everywhere(tmp_path, recipe, 2, f"{recipe}: {message}")


# --- image references ----------------------------------------------------------------------------

REFERENCES = [
    ("repository-uppercase", "image.repository", "ghcr.io/{owner}/GLM53", "must be lowercase"),
    ("repository-space", "image.repository", "ghcr.io/{owner}/glm 53", "invalid reference format"),
    ("repository-with-tag", "image.repository", "ghcr.io/{owner}/glm53:latest", "give the repository only"),
    ("repository-double-separator", "image.repository", "ghcr.io/{owner}/glm..53", "invalid reference format"),
    ("repository-too-long", "image.repository", "ghcr.io/{owner}/" + "a" * 260, "must not be more than 255 characters"),
    ("repository-uppercase-digest", "image.repository", "ghcr.io/{owner}/glm53@sha256:" + "A" * 64, "(invalid digest;"),
    ("base-uppercase", "base.image", "VLLM/vllm-openai", "must be lowercase"),
    ("base-space", "base.image", "vllm/vllm openai", "invalid reference format"),
    ("base-tag-space", "base.tag", f"v{DEFAULT_VERSION} rc", "not a valid image tag"),
    ("tag-uppercase-allowed-but-space-not", "image.tags", ["latest", "GB 300"], "image.tags[1]: not a valid image tag"),
    ("tag-too-long", "image.tags", ["x" * 129], "image.tags[0]: not a valid image tag"),
    ("tag-bad-placeholder", "image.tags", ["{date.year}"], "image.tags[0]: unknown placeholder"),
]


@pytest.mark.parametrize("name,key,value,message", REFERENCES, ids=[c[0] for c in REFERENCES])
def test_image_references(tmp_path, name, key, value, message):
    recipe = copy_recipe(tmp_path, with_base_digest(_set(key, value)))
    run_everywhere(tmp_path, recipe, 2, f"{recipe}: {key.split('.')[0]}.", message)


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--repository", "127.0.0.1:5000/Me/glm"],
            "--repository: '127.0.0.1:5000/Me/glm' is not a valid image repository",
        ),
        (["--repository", "ghcr.io/me/glm:tag"], "--repository: give the repository only"),
        (["--owner", "Acme Corp"], "--owner 'Acme Corp': not a valid registry namespace"),
    ],
)
def test_reference_overrides(tmp_path, args, message):
    recipe = copy_recipe(tmp_path, with_base_digest())
    for command in (["build", "--dry-run"], ["render"]):
        assert_refused(invoke([*command, "--recipe", recipe, *args]), 2, message)


@pytest.mark.parametrize(
    "args,env,line",
    [
        (
            ["--owner", "Acme"],
            {},
            "error: --owner 'Acme': not a valid registry namespace "
            "(lowercase letters, digits, and . _ - between them); use 'acme'",
        ),
        (["--owner", "Acme Corp"], {}, "; use 'acme-corp'"),
        ([], {"IMAGE_OWNER": "Acme"}, "error: IMAGE_OWNER (environment) 'Acme': not a valid registry namespace"),
    ],
)
def test_an_owner_is_blamed_where_it_came_from_with_a_fix(tmp_path, args, env, line):
    recipe = copy_recipe(tmp_path, with_base_digest())
    done = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "build", "--dry-run", "--recipe", str(recipe), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, **env},
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert line in done.stderr and "recipe.yaml" not in done.stderr
