"""The GitHub Actions workflow: actionlint, the GitHub workflow schema and zizmor (the Actions security
linter, offline) accept it, and it does what it says.

actionlint comes from its PyPI wheel and the schema from check-jsonschema's
built-in copy (both pinned in pyproject.toml's test extra); the schema check runs
with every proxy pointed at a closed port, so it cannot reach the network.
Each checker is also shown a broken copy, which it must reject.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest
import yaml
from support.repo import REPO
from support.workflow_linters import WORKFLOWS, actionlint, schema_check, workflow_files, zizmor

WORKFLOW = WORKFLOWS / "image.yml"
MATRIX_SCRIPT = REPO / ".github" / "recipe_matrix.py"


def workflow() -> dict:
    # PyYAML reads the key `on` as True (YAML 1.1); the schema checker reads it as "on".
    return yaml.safe_load(WORKFLOW.read_text())


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_actionlint_zizmor_and_the_schema_accept_every_workflow(path):
    for check in (actionlint, zizmor, schema_check):
        run = check(path)
        assert run.returncode == 0, (check.__name__, run.stdout + run.stderr)
    assert "No findings to report" in zizmor(path).stdout


def test_actionlint_rejects_a_broken_copy(tmp_path):
    broken = tmp_path / ".github" / "workflows" / "image.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(WORKFLOW.read_text().replace("needs.recipes.outputs.matrix", "needs.recipe.outputs.matrix"))
    run = actionlint(broken)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "recipe" in run.stdout


def test_zizmor_finds_a_matrix_value_expanded_in_a_run_block(tmp_path):
    injected = tmp_path / ".github" / "workflows" / "image.yml"
    injected.parent.mkdir(parents=True)
    text = WORKFLOW.read_text()
    assert 'echo "### $NAME (index)"' in text
    injected.write_text(text.replace('echo "### $NAME (index)"', 'echo "### ${{ matrix.name }} (index)"'))
    run = zizmor(injected)
    assert run.returncode != 0 and "template-injection" in run.stdout, run.stdout + run.stderr


def test_the_workflow_schema_accepts_the_image_workflow_offline():
    run = schema_check(WORKFLOW)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok -- validation done" in run.stdout


def test_the_workflow_schema_rejects_a_broken_copy(tmp_path):
    broken = tmp_path / "image.yml"
    broken.write_text(WORKFLOW.read_text().replace("    runs-on: ubuntu-24.04\n", "    runs_on: ubuntu-24.04\n", 1))
    run = schema_check(broken)
    assert run.returncode == 1, run.stdout + run.stderr


def test_every_action_is_pinned_by_full_commit_sha_with_its_release():
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", WORKFLOW.read_text(), re.M)
    assert len(uses) >= 7
    for action, comment in uses:
        name, _, ref = action.partition("@")
        assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{action} is not pinned by a full commit SHA"
        assert re.fullmatch(r"\s*# v\d+(\.\d+)*", comment), f"{action}: no release comment"
        assert name in {"actions/checkout", "actions/setup-python", "docker/login-action", "sigstore/cosign-installer"}


def test_publish_pushes_to_ghcr_with_the_workflow_token_and_only_outside_pull_requests():
    data = workflow()
    assert data["permissions"] == {"contents": "read"}
    publish = data["jobs"]["publish"]
    assert publish["permissions"] == {"contents": "read", "packages": "write", "id-token": "write"}
    assert publish["if"] == "github.event_name != 'pull_request'"
    assert publish["runs-on"] == "${{ matrix.runner }}"
    login = next(step for step in publish["steps"] if str(step.get("uses", "")).startswith("docker/login-action@"))
    assert login["with"] == {
        "registry": "ghcr.io",
        "username": "${{ github.actor }}",
        "password": "${{ secrets.GITHUB_TOKEN }}",
    }
    runs = "\n".join(step.get("run", "") for step in publish["steps"])
    assert "IMAGE_OWNER=${GITHUB_REPOSITORY_OWNER,,}" in runs  # bash lowercases the owner
    assert '--owner "$IMAGE_OWNER" --push' in runs
    assert "build.py verify" in runs


def test_pull_requests_run_the_host_side_checks_for_every_recipe():
    data = workflow()
    assert set(data[True]) == {"push", "pull_request", "workflow_dispatch"}
    checks = data["jobs"]["checks"]
    assert "if" not in checks
    assert checks["strategy"]["matrix"] == "${{ fromJSON(needs.recipes.outputs.recipes) }}"
    runs = [step.get("run", "") for step in checks["steps"]]
    for command in ("build.py render", "build.py geometry", "build.py compose"):
        assert any(command in run and '--recipe "$RECIPE"' in run for run in runs), command


def matrix_outputs() -> dict:
    run = subprocess.run(
        [sys.executable, str(MATRIX_SCRIPT)], capture_output=True, text=True, cwd=str(REPO), timeout=120
    )
    assert run.returncode == 0, run.stderr
    lines = dict(line.split("=", 1) for line in run.stdout.strip().splitlines())
    assert set(lines) == {"matrix", "recipes", "indexes", "has_indexes"}
    return {key: (value if key == "has_indexes" else json.loads(value)) for key, value in lines.items()}


def test_the_matrix_has_every_recipe_and_platform_on_a_native_runner():
    outputs = matrix_outputs()
    entries = outputs["matrix"]["include"]
    recipes = sorted(REPO.glob("recipes/*/recipe.yaml"))
    native = {"linux/arm64": "ubuntu-24.04-arm", "linux/amd64": "ubuntu-24.04"}  # GitHub's hosted runner labels
    expected = []
    for path in recipes:
        data = yaml.safe_load(path.read_text())
        for platform in data.get("platforms") or [data["platform"]]:
            expected.append((path.relative_to(REPO).as_posix(), platform, native[platform]))
    assert sorted((e["recipe"], e["platform"], e["runner"]) for e in entries) == sorted(expected)
    gb300 = [entry for entry in entries if entry["name"] == "glm53-flash-dflash2-gb300"]
    assert [entry["runner"] for entry in gb300] == ["ubuntu-24.04-arm"]
    sm100 = {entry["platform"]: entry["runner"] for entry in entries if entry["name"] == "glm53-flash-dflash2-sm100"}
    assert sm100 == {"linux/amd64": "ubuntu-24.04", "linux/arm64": "ubuntu-24.04-arm"}
    assert sorted(e["recipe"] for e in outputs["recipes"]["include"]) == [
        p.relative_to(REPO).as_posix() for p in recipes
    ]
    assert [e["name"] for e in outputs["indexes"]["include"]] == ["glm53-flash-dflash2-sm100"]
    assert outputs["has_indexes"] == "true"


def test_each_platform_is_built_on_its_runner_and_the_index_job_puts_the_index():
    data = workflow()
    publish, index = data["jobs"]["publish"], data["jobs"]["index"]
    assert publish["strategy"]["matrix"] == "${{ fromJSON(needs.recipes.outputs.matrix) }}"
    assert '--platform "$PLATFORM"' in "\n".join(step.get("run", "") for step in publish["steps"])
    assert publish["env"]["PLATFORM"] == "${{ matrix.platform }}"
    assert index["needs"] == ["recipes", "publish"]
    assert index["if"] == "github.event_name != 'pull_request' && needs.recipes.outputs.has_indexes == 'true'"
    assert index["permissions"] == {"contents": "read", "packages": "write", "id-token": "write"}
    assert index["strategy"]["matrix"] == "${{ fromJSON(needs.recipes.outputs.indexes) }}"
    assert 'build.py index --recipe "$RECIPE" --owner "$IMAGE_OWNER"' in "\n".join(
        step.get("run", "") for step in index["steps"]
    )


def matrix_module():
    """.github/recipe_matrix.py loaded as a module (a workflow script: .github is no package)."""
    spec = importlib.util.spec_from_file_location("recipe_matrix", MATRIX_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_platform_without_a_native_runner_is_one_error_line(monkeypatch):
    from stackbuild.core.errors import RecipeError

    recipe_matrix = matrix_module()

    monkeypatch.setattr(recipe_matrix, "NATIVE_RUNNERS", {"linux/amd64": "ubuntu-24.04"})
    with pytest.raises(RecipeError) as raised:
        recipe_matrix.matrix(REPO)
    assert raised.value.key == "platform"
    assert "no native GitHub-hosted runner for linux/arm64" in str(raised.value)


def test_the_jobs_that_push_sign_keyless_and_verify_against_the_workflow_identity():
    """id-token: write only where something is signed; each push signed, the verify checks the signature first."""
    jobs = workflow()["jobs"]
    minting = {name for name, job in jobs.items() if (job.get("permissions") or {}).get("id-token") == "write"}
    assert minting == {"publish", "index"}
    for name in minting:
        steps = jobs[name]["steps"]
        installer = [s for s in steps if str(s.get("uses", "")).startswith("sigstore/cosign-installer@")]
        assert len(installer) == 1 and installer[0]["with"]["cosign-release"].startswith("v")
        pushes = [
            s["run"] for s in steps if "build.py build" in s.get("run", "") or "build.py index" in s.get("run", "")
        ]
        assert pushes and all("--sign-keyless" in run for run in pushes)
    verify = next(s["run"] for s in jobs["publish"]["steps"] if "build.py verify" in s.get("run", ""))
    assert '--certificate-identity "$GITHUB_SERVER_URL/$GITHUB_WORKFLOW_REF"' in verify
    assert "--certificate-oidc-issuer https://token.actions.githubusercontent.com" in verify
