"""The docs walk's table against the docs, without an engine: every command of docs/quickstart-gb300.md's
and README.md's ```sh blocks is run (as written, or with the table's substitutions) or mapped with a
reason, and every entry of the table changes the commands it is meant for. The live walk is
tests/docs/test_docs_walk.py; a doc edit the table does not follow fails here first."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import docs_walk
import pytest
import yaml

from geometry.preflight.checkpoint import snapshot_of
from stackbuild.core.gate import recipe_geometry
from stackbuild.core.recipe import load_recipe

STAND_INS = docs_walk.StandIns(
    work=Path("/walk"),
    models=Path("/walk/models"),
    staged=Path("/walk/staged"),
    source=Path("/walk/source"),
    registry="127.0.0.1:5000",
    registry_user="tester",
    owner="walk-0123456789",
    port=18000,
)


def _all_sh_commands() -> list[str]:
    """Every command of every ```sh block of the walk's documents, read without the walk's sections."""
    out = []
    for doc in (docs_walk.QUICKSTART, docs_walk.README):
        out += [c for _, commands in docs_walk.sh_blocks(doc) for c in commands]
    return out


def test_every_command_of_the_docs_is_run_or_mapped_with_a_reason():
    plan = docs_walk.plan(STAND_INS)
    walked = [step.command.text for step in plan.steps]
    assert sorted(walked) == sorted(_all_sh_commands())  # none dropped, none run twice
    for step in plan.steps:
        if step.run is None or step.run != step.command.text:
            assert step.why, step.command
    assert [s.command.text.split()[:2] for s in plan.steps if s.run is None] == [
        ["make", "test"],
        *[["cosign", "verify"], ["cosign", "verify-attestation"]] * 2,  # the signing e2e tests run them
    ]


def test_the_walk_runs_each_placeholder_replaced_and_nothing_of_the_gpu_hosts_left():
    runs = "\n".join(step.run for step in docs_walk.plan(STAND_INS).steps if step.run)
    for placeholder in ("ghcr.io", "YOUR_USER", "your-user", "REPOSITORY_URL", "/srv/models", "127.0.0.1:8000 "):
        assert placeholder not in runs
    assert "huggingface.co" not in runs and "model_info(" not in runs


def test_a_command_the_table_does_not_know_runs_as_written():
    commands = docs_walk.doc_commands()
    new = docs_walk.Command(docs_walk.QUICKSTART, "## 6. Qualify it", ".venv/bin/python build.py verify X")
    plan = docs_walk.plan(STAND_INS, commands + [new])
    assert plan.steps[-1].run == new.text and plan.steps[-1].why == ()


@pytest.mark.parametrize(
    "drop, entry",
    [
        ("docker login", "'ghcr.io'"),
        ("hf download incoai/", "'.venv/bin/hf download incoai/GLM-5.3-Flash-DFlash2 '"),
        ("--baseline-url", "'http://127.0.0.1:8001'"),
    ],
)
def test_an_entry_that_no_longer_matches_its_commands_fails(drop, entry):
    commands = [c for c in docs_walk.doc_commands() if drop not in c.text]
    with pytest.raises(ValueError) as caught:
        docs_walk.plan(STAND_INS, commands)
    assert entry in str(caught.value)


def test_a_sh_block_outside_the_walks_sections_is_refused(monkeypatch):
    monkeypatch.setattr(docs_walk, "WALK", tuple(w for w in docs_walk.WALK if w[1] != "## 6. Qualify it"))
    with pytest.raises(ValueError, match=r"quickstart-gb300.md: ```sh blocks under \['## 6. Qualify it'\]"):
        docs_walk.doc_commands()


def test_continued_lines_are_one_command_and_comments_stay_with_it():
    readme = [c for c in docs_walk.doc_commands() if c.doc == docs_walk.README]
    qualify = [c for c in readme if "build.py qualify" in c.text]
    assert len(qualify) == 1 and qualify[0].text.startswith("docker compose -f ") and "\\" not in qualify[0].text
    assert docs_walk.split_comment('echo "a # b" x   # c') == ('echo "a # b" x', "   # c")
    assert docs_walk.split_comment("echo a#b") == ("echo a#b", "")


def test_the_walks_script_is_bash():
    script = docs_walk.script(docs_walk.plan(STAND_INS))
    checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_the_stand_in_recipe_is_the_gb300_recipes_names_on_the_cpu_recipes_settings(tmp_path):
    data = docs_walk.stand_in_recipe("127.0.0.1:5000", "127.0.0.1:5000/vllm/vllm-cpu", "v0.32.0", 18000)
    gb300 = yaml.safe_load((docs_walk.REPO / docs_walk.DEFAULT_RECIPE_DIR / "recipe.yaml").read_text())
    directory = tmp_path / "recipe"
    (directory / "configs").mkdir(parents=True)
    cpu = yaml.safe_load((docs_walk.CPU_RECIPE_DIR / "recipe.yaml").read_text())
    for role in ("target", "drafter"):
        (directory / data[role]["config"]).write_bytes((docs_walk.CPU_RECIPE_DIR / cpu[role]["config"]).read_bytes())
    (directory / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    recipe = load_recipe(directory / "recipe.yaml")
    assert recipe.name == gb300["name"]
    assert (recipe.target.id, recipe.target.path) == (gb300["target"]["id"], gb300["target"]["path"])
    assert (recipe.drafter.id, recipe.drafter.path) == (gb300["drafter"]["id"], gb300["drafter"]["path"])
    assert recipe.image.repository == "127.0.0.1:5000/{owner}/" + gb300["name"]
    assert not recipe.hardware.has_gpu and recipe.serving.port == 18000
    assert recipe_geometry(recipe, vllm_behaviour="overlay").verdict.passed
    # step 3's sed deletes the lines pin writes back
    assert (directory / "recipe.yaml").read_text().count("\n  config_sha256: ") == 2


def test_a_hub_snapshot_is_what_pin_reads(tmp_path):
    source = tmp_path / "written"
    (source / "sub").mkdir(parents=True)
    (source / "config.json").write_text("{}")
    (source / "sub" / "x.bin").write_bytes(b"x")
    repo, commit = docs_walk.HUB_REPOS["target"], docs_walk.COMMITS["target"]
    snapshot = docs_walk.write_hub_snapshot(source, tmp_path / "hub", repo, commit)
    link = tmp_path / "GLM-5.3-Flash-NVFP4"
    link.symlink_to(snapshot.relative_to(tmp_path))
    found = snapshot_of(str(link))
    assert (found.commit, found.repo) == (commit, repo)
    assert (link / "sub" / "x.bin").read_bytes() == b"x" and (link / "config.json").is_symlink()


def test_stand_ins_are_what_the_table_substitutes():
    other = replace(STAND_INS, port=19000, owner="walk-x")
    runs = "\n".join(step.run for step in docs_walk.plan(other).steps if step.run)
    assert "http://127.0.0.1:19000" in runs and "http://127.0.0.1:19001" in runs and "IMAGE_OWNER=walk-x" in runs
