"""`build.py pin`: the commits and config sha256s of the mounted snapshots written into the recipe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from models_support import COMMIT, DRAFTER_DIR, TARGET_DIR, cache_models_dir, models_dir
from recipe_copies import DEFAULT_RECIPE_DIR
from support.repo import REPO

from stackbuild.core.recipe import load_recipe


def recipe_copy(tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "recipe"
    shutil.copytree(DEFAULT_RECIPE_DIR, target, ignore=shutil.ignore_patterns("recipe.lock.json"))
    return target / "recipe.yaml"


def pin(recipe: Path, models: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "pin", "--recipe", str(recipe), "--models-dir", str(models)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def test_pin_writes_the_commits_keeping_every_other_line(tmp_path):
    recipe = recipe_copy(tmp_path)
    before = recipe.read_text().splitlines()
    run = pin(recipe, cache_models_dir(tmp_path / "models"))
    assert run.returncode == 0, run.stderr
    assert run.stdout == (
        f"pinned in {recipe}: target.revision {COMMIT['target']}; drafter.revision {COMMIT['drafter']}\n"
    )
    after = recipe.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and len(changed) == 2
    assert changed[0][1] == (
        f'  revision: "{COMMIT["target"]}"  # the Hub commit you downloaded: README '
        '"Pinning the checkpoints" (never guessed here)'
    )
    loaded = load_recipe(recipe)
    assert (loaded.target.revision, loaded.drafter.revision) == (COMMIT["target"], COMMIT["drafter"])
    assert not list(recipe.parent.glob(".*.tmp"))
    again = pin(recipe, tmp_path / "models")
    assert again.returncode == 0 and again.stdout.startswith("already pinned in ")
    assert recipe.read_text().splitlines() == after


def test_pin_adds_the_keys_a_recipe_leaves_out(tmp_path):
    recipe = recipe_copy(tmp_path)
    text = "".join(
        line
        for line in recipe.read_text().splitlines(keepends=True)
        if not line.lstrip().startswith(("revision:", "config_sha256:"))
    )
    recipe.write_text(text)
    assert pin(recipe, cache_models_dir(tmp_path / "models")).returncode == 0
    loaded = load_recipe(recipe)
    assert loaded.drafter.revision == COMMIT["drafter"]
    assert loaded.target.config_sha256 == load_recipe(DEFAULT_RECIPE_DIR / "recipe.yaml").target.config_sha256


def test_pin_refuses_a_plain_directory(tmp_path):
    recipe = recipe_copy(tmp_path)
    before = recipe.read_text()
    models = models_dir(tmp_path / "models")
    run = pin(recipe, models)
    assert run.returncode == 2
    assert run.stderr == (
        f"error: --models-dir: the target {models.resolve()}/{TARGET_DIR}: "
        f"{models.resolve()}/{TARGET_DIR} is a plain directory (no Hub commit in its path); nothing "
        "to pin (a Hugging Face cache snapshot names its commit: models--ORG--NAME/snapshots/<commit>/)\n"
    )
    assert recipe.read_text() == before


def test_pin_refuses_a_config_that_is_not_the_recipes_snapshot(tmp_path):
    recipe = recipe_copy(tmp_path)
    before = recipe.read_text()
    models = cache_models_dir(tmp_path / "models")
    config = models / DRAFTER_DIR / "config.json"
    blob = config.resolve()
    blob.write_text(blob.read_text().replace('"num_hidden_layers": 5', '"num_hidden_layers": 6'))
    run = pin(recipe, models)
    assert run.returncode == 26, run.stderr
    assert run.stderr.startswith(f"error: {models.resolve()}/{DRAFTER_DIR}/config.json has sha256 ")
    assert "not that of the recipe's snapshot configs/drafter.config.json" in run.stderr
    assert recipe.read_text() == before
