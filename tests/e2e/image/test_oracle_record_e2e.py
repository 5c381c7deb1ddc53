"""End to end: `build.py record` keeps the built image's oracle answer; the next build's gate uses it.

The session's amd64 build ran the gate with vLLM imported and left its record
in the image. Copied next to a recipe copy, it spares the next build's gate
that import, and the gate still holds the simulator to it: an edited record
fails the build. Records that belong to nothing here are refused.
"""

from __future__ import annotations

import json

import pytest
from stack_e2e import cli, local_tags, recipe_copy, unique_repository

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def error_line(run) -> str:
    return next(line for line in run.stderr.splitlines() if line.startswith("error: "))


def recorded_copy(amd64_build, synthetic_base_amd64, tmp_path, name="b200-amd64"):
    """A copy of the session build's recipe with the record taken from its image."""
    base = synthetic_base_amd64
    recipe = recipe_copy(tmp_path, name, base=base.image, tag=base.tag, digest=base.digest)
    built = f"{amd64_build.repository}:{amd64_build.report['tags'][-1]}"
    run = cli("record", "--recipe", str(recipe), "--image", built, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["record"] == str(recipe.with_name("recipe.oracle.json"))
    return recipe


def test_the_next_build_checks_against_the_record_instead_of_importing_vllm(
    amd64_build, synthetic_base_amd64, registry, tmp_path
):
    assert amd64_build.report["oracle_record"] == {
        "shipped": None,
        "gate_checked_against": "imported vLLM",
        "kept": None,
    }
    recipe = recorded_copy(amd64_build, synthetic_base_amd64, tmp_path)
    repository = unique_repository(registry.address, "recorded")
    # --no-cache: the gate step must run here, not come from an earlier build of the same context.
    run = cli(
        "build",
        "--recipe",
        str(recipe),
        "--repository",
        repository,
        "--json",
        "--no-cache",
        "--report",
        str(tmp_path / "r.json"),
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout)
    assert report["oracle_record"] == {
        "shipped": str(recipe.with_name("recipe.oracle.json")),
        "gate_checked_against": "record",
        "kept": None,
    }
    assert report["geometry_report"]["oracle"] == {"agrees": True, "differences": [], "source": "record"}
    assert "vLLM not imported" in run.stderr
    # Same simulator verdict and numbers as the build that imported vLLM.
    first, again = dict(amd64_build.report["geometry_report"]), dict(report["geometry_report"])
    first.pop("oracle"), again.pop("oracle")
    assert again == first


def test_an_edited_record_fails_the_gate_and_tags_nothing(amd64_build, synthetic_base_amd64, registry, tmp_path):
    recipe = recorded_copy(amd64_build, synthetic_base_amd64, tmp_path)
    path = recipe.with_name("recipe.oracle.json")
    record = json.loads(path.read_text())
    record["vllm"]["with_drafter"]["bytes_per_block"] += 4096
    path.write_text(json.dumps(record))
    repository = unique_repository(registry.address, "edited-record")
    run = cli("build", "--recipe", str(recipe), "--repository", repository)
    assert run.returncode == 5, run.stderr[-4000:]
    assert "build step failed: geometry gate" in error_line(run)
    assert "ORACLE DISAGREEMENT (simulator vs vLLM's recorded answer)" in run.stderr
    assert "with_drafter.bytes_per_block" in run.stderr
    assert local_tags(repository) == []


def test_a_record_for_another_recipe_or_from_an_image_without_one_is_refused(
    amd64_build, synthetic_base_amd64, tmp_path
):
    base = synthetic_base_amd64
    built = f"{amd64_build.repository}:{amd64_build.report['tags'][-1]}"
    other = recipe_copy(
        tmp_path,
        "b200-amd64",
        base=base.image,
        tag=base.tag,
        digest=base.digest,
        edit=lambda data: data["geometry"].update(kv_cache_memory_gib=data["geometry"]["kv_cache_memory_gib"] + 1),
    )
    run = cli("record", "--recipe", str(other), "--image", built)
    assert run.returncode == 2
    assert "is for another gate input" in error_line(run) and "rebuild the image" in error_line(run)
    assert not other.with_name("recipe.oracle.json").exists()

    run = cli("record", "--recipe", str(other), "--image", base.local_reference)
    assert run.returncode == 2
    assert error_line(run).endswith("no oracle record in the image (built before records existed?)")


def test_an_unreadable_record_next_to_the_recipe_is_a_one_line_error(synthetic_base_amd64, tmp_path):
    base = synthetic_base_amd64
    recipe = recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    recipe.with_name("recipe.oracle.json").write_text("[]")
    run = cli("build", "--recipe", str(recipe), "--dry-run")
    assert run.returncode == 2
    assert (
        error_line(run)
        == f"error: oracle record {recipe.with_name('recipe.oracle.json')}: schema is not glm53-oracle-record/1"
    )


def test_record_replaces_an_unreadable_record(amd64_build, synthetic_base_amd64, tmp_path):
    base = synthetic_base_amd64
    recipe = recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    recipe.with_name("recipe.oracle.json").write_text("[]")
    built = f"{amd64_build.repository}:{amd64_build.report['tags'][-1]}"
    run = cli("record", "--recipe", str(recipe), "--image", built)
    assert run.returncode == 0, run.stderr
    assert json.loads(recipe.with_name("recipe.oracle.json").read_text())["schema"] == "glm53-oracle-record/1"


def test_keep_record_writes_the_record_a_build_made_and_replaces_a_stale_one(
    amd64_build, synthetic_base_amd64, registry, tmp_path
):
    base = synthetic_base_amd64
    recipe = recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    path = recipe.with_name("recipe.oracle.json")
    repository = unique_repository(registry.address, "kept")

    def build() -> dict:
        run = cli(
            "build",
            "--recipe",
            str(recipe),
            "--repository",
            repository,
            "--keep-record",
            "--json",
            "--report",
            str(tmp_path / "r.json"),
        )
        assert run.returncode == 0, run.stderr[-4000:]
        return json.loads(run.stdout)

    # No record yet: the gate imported vLLM, its answer lands next to the recipe, as `record` would copy it.
    first = build()
    assert first["oracle_record"] == {"shipped": None, "gate_checked_against": "imported vLLM", "kept": str(path)}
    kept = path.read_bytes()
    assert cli("record", "--recipe", str(recipe), "--image", first["image_id"]).returncode == 0
    assert path.read_bytes() == kept

    # The gate used it: left as it is.
    second = build()
    assert second["oracle_record"] == {"shipped": str(path), "gate_checked_against": "record", "kept": None}
    assert path.read_bytes() == kept

    # Stale (another torch recorded): the gate imported vLLM again and the fresh record replaces it.
    record = json.loads(kept)
    record["key"]["distributions"]["torch"] = "0.0.1"
    path.write_text(json.dumps(record))
    third = build()
    assert third["oracle_record"] == {"shipped": str(path), "gate_checked_against": "imported vLLM", "kept": str(path)}
    assert path.read_bytes() == kept


def test_a_record_that_cannot_be_written_is_a_one_line_error(amd64_build, synthetic_base_amd64, tmp_path):
    base = synthetic_base_amd64
    recipe = recipe_copy(tmp_path, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    recipe.with_name("recipe.oracle.json").mkdir()  # in the way, even for root
    run = cli(
        "record", "--recipe", str(recipe), "--image", f"{amd64_build.repository}:{amd64_build.report['tags'][-1]}"
    )
    assert run.returncode == 2
    assert (
        error_line(run)
        == f"error: {recipe.with_name('recipe.oracle.json')}: cannot write the oracle record: Is a directory"
    )
    assert sorted(p.name for p in recipe.parent.iterdir()) == ["configs", "recipe.oracle.json", "recipe.yaml"]
