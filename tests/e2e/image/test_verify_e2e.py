"""End to end: `build.py verify IMAGE@DIGEST --recipe R` on a pushed image."""

from __future__ import annotations

import json

import pytest
from stack_e2e import cli, json_events, recipe_copy

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def test_verify_passes_for_the_image_of_the_recipe(main_build, on_engine):
    pinned = main_build.report["pushed_reference"]
    run = cli(
        "verify", pinned, "--recipe", str(main_build.recipe), "--json", docker_config_dir=main_build.docker_config
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["verdict"] == "pass" and result["mismatches"] == []
    assert result["geometry_verdict"] == "pass" and result["geometry_report"]["verdict"]["passed"] is True
    # The gate again, held to vLLM's answer the build recorded in the image for this very vLLM tree.
    assert result["geometry_report"]["oracle"] == {"agrees": True, "differences": [], "source": "record"}
    assert result["labels_compared"] >= 15
    phases = [(e["phase"], e["status"]) for e in json_events(run.stderr) if e["event"] == "phase"]
    assert phases == [
        ("pull", "start"),
        ("pull", "done"),
        ("attestations", "start"),
        ("attestations", "done"),
        ("geometry gate", "start"),
        ("geometry gate", "done"),
    ]


def test_verify_can_plan_with_the_images_vllm_instead_of_its_record(amd64_build):
    run = cli(
        "verify",
        amd64_build.report["pushed_reference"],
        "--recipe",
        str(amd64_build.recipe),
        "--import-vllm",
        "--json",
        docker_config_dir=amd64_build.docker_config,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["geometry_report"]["oracle"] == {"agrees": True, "differences": [], "source": "imported vLLM"}
    assert result["geometry_report"]["verdict"] == amd64_build.report["geometry_report"]["verdict"]


def test_verify_against_another_recipe_names_every_label_that_differs(amd64_build, synthetic_base_amd64, tmp_path):
    base = synthetic_base_amd64
    other = recipe_copy(
        tmp_path,
        "b200-amd64",
        base=base.image,
        tag=base.tag,
        digest=base.digest,
        edit=lambda d: d["serving"].update(served_model_name="another-name"),
    )
    run = cli(
        "verify",
        amd64_build.report["pushed_reference"],
        "--recipe",
        str(other),
        docker_config_dir=amd64_build.docker_config,
    )
    assert run.returncode == 10, run.stderr
    assert f"does not match {other}" in run.stderr
    assert "label io.github.glm53.recipe.sha256: image has" in run.stderr
    assert "geometry gate" not in run.stderr.split("does not match")[1]  # the gate itself still passed


def test_verify_needs_a_digest(amd64_build):
    run = cli(
        "verify",
        f"{amd64_build.repository}:latest",
        "--recipe",
        str(amd64_build.recipe),
        docker_config_dir=amd64_build.docker_config,
    )
    assert run.returncode == 2, run.stderr  # a usage error
    assert "give the image by digest" in run.stderr
