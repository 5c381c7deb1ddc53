"""The pinned tag's {rev}: one tag per build input set (a commit, or the inputs' digest).

A committed copy of this repository in a temporary directory stands in
for the project: the expected commit comes from `git rev-parse`, the expected
digests are compared between states, never copied from the code's output.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from recipe_copies import DEFAULT_RECIPE_DIR, TEST_DIGEST, copy_recipe, pinned
from support.repo import REPO

from stackbuild.core.naming import ImageName, format_tags, revision_tag_field, source_revision
from stackbuild.core.recipe import load_recipe
from stackbuild.image.plan import make_plan
from stackbuild.image.render import write_context

EPOCH = 1764460800  # 2025-11-30


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_AUTHOR_DATE": f"@{EPOCH} +0000",
        "GIT_COMMITTER_DATE": f"@{EPOCH} +0000",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env).stdout


def tracked_files(repo: Path) -> list[str]:
    return [p for p in git(repo, "ls-files", "-z").split("\0") if p]


@pytest.fixture
def project(tmp_path) -> Path:
    """A committed copy of this repository's tracked files, with a copy of the default recipe as recipes/r."""
    repo = tmp_path / "project"
    for name in tracked_files(REPO):
        if (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / name, repo / name)
    recipe_dir = repo / "recipes" / "r"
    shutil.copytree(
        DEFAULT_RECIPE_DIR, recipe_dir, ignore=shutil.ignore_patterns("recipe.lock.json", "recipe.oracle.json")
    )
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


@pytest.mark.parametrize("change", ["overlay/apply.py", "recipes/r/recipe.oracle.json"])
def test_uncommitted_changes_are_named_by_the_inputs(project, change):
    """A changed tracked input, an untracked file next to the recipe: another image, another rev."""
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
    (project / "geometry" / "verdict" / "gate.py").write_text("changed\n")
    assert rev(project) != first


def test_tags_are_formatted_in_one_place(project):
    recipe = load_recipe(project / "recipes" / "r" / "recipe.yaml")
    assert format_tags(recipe, epoch=EPOCH, rev="0123456789ab") == ("latest", "sm100-gb300-20251130-0123456789ab")
    name = ImageName("ghcr.io/acme/x", ("latest", "sm100-gb300-20251130-0123456789ab"))
    assert name.pinned_tags == ("sm100-gb300-20251130-0123456789ab",)
    assert name.for_architecture("arm64").tags == ("sm100-gb300-20251130-0123456789ab-arm64",)


def context_source_directories(tmp_path, monkeypatch) -> set[str]:
    """The repository directories whose files the render copies into a build context, found by writing one.

    Each copied file is traced back to the tracked file of this repository
    with the same bytes and name (the longest shared path tail decides among
    equal files); what has no such source is generated by the host code.
    """
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    context = write_context(make_plan(load_recipe(copy_recipe(tmp_path, pinned)), owner="acme"), tmp_path / "context")
    by_bytes: dict[tuple[bytes, str], list[str]] = {}
    for name in tracked_files(REPO):
        if (REPO / name).is_file():
            by_bytes.setdefault(((REPO / name).read_bytes(), Path(name).name), []).append(name)
    directories, generated = set(), set()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        parts = path.relative_to(context).parts
        candidates = by_bytes.get((path.read_bytes(), path.name), [])
        if not candidates:
            generated.add(path.name)
            continue

        def shared_tail(name: str) -> int:
            theirs = Path(name).parts
            return next(
                (n for n in range(min(len(theirs), len(parts))) if theirs[-1 - n] != parts[-1 - n]),
                min(len(theirs), len(parts)),
            )

        best = max(shared_tail(c) for c in candidates)
        [source] = [c for c in candidates if shared_tail(c) == best]
        directories.add(Path(source).parent.as_posix())
    assert generated == {"Dockerfile", "gate-input.json", "image-labels.json", "preflight-checked.json"}
    return directories


def _modules_only(directory: str) -> bool:
    """Whether the render copies only the modules the image imports from ``directory`` (not every file)."""
    return directory.split("/")[0] in ("geometry", "overlay") and not directory.startswith("overlay/series")


def test_a_new_file_that_reaches_the_image_changes_the_rev(project, tmp_path, monkeypatch):
    """An untracked file reaches the image when its directory is copied whole (the series, the host code):
    the rev is then the inputs' digest. A module nothing in the image imports does not reach it."""
    directories = context_source_directories(tmp_path, monkeypatch)
    assert {"overlay", "geometry", "geometry/preflight", "overlay/series/vllm-0.33.0"} <= directories
    clean = rev(project)
    assert clean == git(project, "rev-parse", "HEAD").strip()[:12]
    for directory in sorted(directories):
        probe = project / directory / "zz_untracked_probe.py"
        probe.write_text("first = 1\n")
        first = rev(project)
        if _modules_only(directory):
            assert first == clean, directory
            probe.unlink()
            continue
        assert re.fullmatch(r"x[0-9a-f]{11}", first), directory
        probe.write_text("second = 2\n")
        assert rev(project) not in (first, clean), directory  # its bytes are in the digest
        probe.unlink()
        assert rev(project) == clean, directory


def test_an_ignored_file_in_a_copied_directory_changes_the_rev(project):
    """git does not list an ignored file as untracked, but the render copies it all the same."""
    clean = rev(project)
    ignored = project / "overlay" / "series" / "vllm-0.33.0" / ".hypothesis" / "note.py"
    ignored.parent.mkdir()
    ignored.write_text("x = 1\n")
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""
    assert re.fullmatch(r"x[0-9a-f]{11}", rev(project))
    assert rev(project) != clean


@pytest.mark.parametrize("change", ["edit", "new module"])
def test_host_code_is_a_build_input(project, change):
    """stackbuild/ renders the Dockerfile and writes the gate input, the pre-flight record and the labels."""
    clean = rev(project)
    path = project / "stackbuild" / "core" / ("labels.py" if change == "edit" else "zz_new_module.py")
    original = path.read_text() if path.exists() else ""
    path.write_text(original + "# one\n")
    first = rev(project)
    assert re.fullmatch(r"x[0-9a-f]{11}", first) and first != clean
    path.write_text(original + "# two\n")
    assert rev(project) not in (first, clean)
