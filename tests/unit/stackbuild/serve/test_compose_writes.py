"""Writes stay where they belong: `compose` writes into the repository only for the repository's own
recipe files (a copy elsewhere writes next to itself), and a compose file holding this machine's
values (`--models-dir`) never modifies the committed one, so the tree's pinned tag stays."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from recipe_copies import copy_recipe
from support.repo import REPO

RECIPE = Path("recipes") / "glm53-flash-dflash2-gb300" / "recipe.yaml"
COMMITTED = Path("compose") / "glm53-flash-dflash2-gb300.compose.yaml"


def build_py(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(checkout / "build.py"), *args], capture_output=True, text=True, cwd=checkout, timeout=600
    )


def test_a_recipe_elsewhere_writes_next_to_itself(tmp_path):
    """A copy with the same name: the repository's committed compose file is left as it was."""
    committed = REPO / COMMITTED
    before = (committed.read_bytes(), committed.stat().st_mtime_ns)
    recipe = copy_recipe(tmp_path)
    done = build_py(REPO, "compose", "--recipe", str(recipe), "--digest", "sha256:" + "ab" * 32)
    assert done.returncode == 0, done.stderr
    written = recipe.parent / COMMITTED.name
    assert f"wrote {written}" in done.stdout
    assert written.is_file()
    assert (committed.read_bytes(), committed.stat().st_mtime_ns) == before


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A clone of the committed HEAD: a clean tree whose pinned tag is the commit's."""
    where = tmp_path_factory.mktemp("clone") / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(where)], check=True, timeout=120)
    return where


def pinned_tag(checkout: Path) -> str:
    done = build_py(checkout, "build", "--dry-run", "--allow-unpinned", "--json", "--recipe", str(checkout / RECIPE))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["tags"][-1]


def test_models_dir_leaves_the_committed_file_and_the_pinned_tag(checkout, tmp_path):
    head = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    tag = pinned_tag(checkout)
    assert tag.endswith("-" + head[:12])  # the clean tree's tag: the commit's
    models = tmp_path / "models"
    models.mkdir()
    done = build_py(checkout, "compose", "--recipe", str(checkout / RECIPE), "--models-dir", str(models))
    assert done.returncode == 0, done.stderr
    local = checkout / "compose" / "glm53-flash-dflash2-gb300.local.compose.yaml"
    assert f"wrote {local}" in done.stdout
    assert str(models) in local.read_text()
    assert "--models-dir hold(s) this machine's values" in done.stderr
    status = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain"], capture_output=True, text=True, check=True
    ).stdout
    assert status == ""  # nothing tracked changed, nothing untracked shows
    assert pinned_tag(checkout) == tag
