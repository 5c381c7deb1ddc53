"""The pinned tag's {rev}: one tag per build input set (a commit, or the inputs' digest).

A small git repository in a temporary directory stands in for the
project: the expected commit comes from `git rev-parse`, the expected
digests are compared between states, never copied from the code's output.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from recipe_copies import DEFAULT_RECIPE_DIR, TEST_DIGEST, pinned
from stackbuild.core.naming import CODE_INPUTS, ImageName, format_tags, revision_tag_field, source_revision
from stackbuild.core.recipe import load_recipe

EPOCH = 1764460800  # 2025-11-30


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_AUTHOR_DATE": f"@{EPOCH} +0000",
           "GIT_COMMITTER_DATE": f"@{EPOCH} +0000", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env).stdout


@pytest.fixture
def project(tmp_path) -> Path:
    """A committed repository holding the code inputs (one file each) and a copy of the default recipe."""
    repo = tmp_path / "project"
    for name in CODE_INPUTS:
        path = repo / name if "." in name else repo / name / "module.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {name}\n")
    (repo / "README.md").write_text("readme\n")
    recipe_dir = repo / "recipes" / "r"
    shutil.copytree(DEFAULT_RECIPE_DIR, recipe_dir, ignore=shutil.ignore_patterns("recipe.lock.json", "recipe.oracle.json"))
    data = yaml.safe_load((recipe_dir / "recipe.yaml").read_text())
    pinned(data)
    (recipe_dir / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "start")
    return repo


def rev(project: Path, epoch: int = EPOCH, base_digest: str = TEST_DIGEST) -> str:
    recipe = load_recipe(project / "recipes" / "r" / "recipe.yaml")
    source = source_revision(recipe, epoch, project)
    return revision_tag_field(recipe, epoch, source, base_digest, project)


def test_a_clean_commit_is_named_by_the_commit(project):
    assert rev(project) == git(project, "rev-parse", "HEAD").strip()[:12]


def test_the_same_commit_twice_gives_the_same_rev_and_another_commit_another(project):
    first = rev(project)
    assert rev(project) == first
    (project / "README.md").write_text("a change that is not a build input\n")
    git(project, "commit", "-q", "-am", "second commit, same day")
    second = rev(project)
    assert second == git(project, "rev-parse", "HEAD").strip()[:12] != first


@pytest.mark.parametrize("change", ["overlay/module.py", "recipes/r/recipe.oracle.json"])
def test_uncommitted_changes_are_named_by_the_inputs(project, change):
    """A changed input, an untracked file next to the recipe: another image, another rev."""
    clean = rev(project)
    (project / change).write_text("changed\n")
    dirty = rev(project)
    assert re.fullmatch(r"x[0-9a-f]{11}", dirty), dirty
    assert rev(project) == dirty  # the same inputs, the same rev
    (project / change).write_text("changed again\n")
    assert rev(project) not in (dirty, clean)


def test_a_changed_readme_leaves_the_commit_but_not_the_label(project):
    """Tracked files differ: the revision label says -dirty, so not the commit's image; README itself is no input."""
    clean = rev(project)
    (project / "README.md").write_text("changed\n")
    dirty = rev(project)
    assert re.fullmatch(r"x[0-9a-f]{11}", dirty) and dirty != clean
    (project / "README.md").write_text("changed again\n")
    assert rev(project) == dirty


def test_an_uncommitted_lock_counts_by_the_digest_it_pins(project):
    """Lock files record when they were resolved: two locks of one digest are one input, another digest another."""
    lock = project / "recipes" / "r" / "recipe.lock.json"
    lock.write_text('{"resolved_at": "2025-11-30T10:00:00Z"}\n')
    first = rev(project)
    assert re.fullmatch(r"x[0-9a-f]{11}", first)  # the commit does not pin the base
    lock.write_text('{"resolved_at": "2025-11-30T11:00:00Z"}\n')
    assert rev(project) == first
    assert rev(project, base_digest="sha256:" + "cd" * 32) != first


def test_an_overridden_source_date_epoch_is_not_the_commit(project):
    assert re.fullmatch(r"x[0-9a-f]{11}", rev(project, EPOCH + 86400))


def test_without_git_the_inputs_name_the_build(project):
    shutil.rmtree(project / ".git")
    first = rev(project)
    assert re.fullmatch(r"x[0-9a-f]{11}", first) and rev(project) == first
    (project / "geometry" / "module.py").write_text("changed\n")
    assert rev(project) != first


def test_tags_are_formatted_in_one_place(project):
    recipe = load_recipe(project / "recipes" / "r" / "recipe.yaml")
    assert format_tags(recipe, epoch=EPOCH, rev="0123456789ab") == ("latest", "sm100-gb300-20251130-0123456789ab")
    name = ImageName("ghcr.io/acme/x", ("latest", "sm100-gb300-20251130-0123456789ab"))
    assert name.pinned_tags == ("sm100-gb300-20251130-0123456789ab",)
    assert name.for_architecture("arm64").tags == ("sm100-gb300-20251130-0123456789ab-arm64",)
