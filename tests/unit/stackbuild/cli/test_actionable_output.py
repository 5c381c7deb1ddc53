"""Output a user can act on: what a line points at is there, nothing unresolved is printed silently."""

from __future__ import annotations

import json

from bad_input_helpers import invoke
from recipe_copies import copy_recipe, pinned, set_key
from support.repo import REPO

DEFAULT = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml"
SOURCE_LABEL = "org.opencontainers.image.source"


def test_geometry_stock_points_at_the_reasons_it_has_just_printed():
    # Stock vLLM fails the default recipe twice (docs/gate.md): the drafter's page is 8 x the MLA
    # page (block 9,216 x 4,096 B against 9,216 x 512 B), and the capacity falls with it.
    result = invoke(["geometry", "--stock", "--recipe", DEFAULT])
    assert result.exit_code == 5, result.stderr
    verdict = result.stdout.split("VERDICT (stock): FAIL\n", 1)[1]
    assert len([line for line in verdict.splitlines() if line.startswith("  - ")]) == 2
    error = result.stderr.splitlines()[-1]
    assert error.endswith("(and 1 more; the verdict above lists all)"), error
    assert "`build.py geometry` shows all" not in result.stderr
    as_json = invoke(["geometry", "--stock", "--json", "--recipe", DEFAULT])
    assert as_json.exit_code == 5
    assert len(json.loads(as_json.stdout)["verdict"]["reasons"]) == 2
    assert as_json.stderr.splitlines()[-1].endswith("(and 1 more; the report's reasons list all)")


def test_the_dry_run_warns_of_an_unfilled_owner_in_the_source_label(tmp_path):
    recipe = copy_recipe(tmp_path, pinned)
    bare = invoke(["build", "--dry-run", "--recipe", recipe])
    assert bare.exit_code == 0, bare.stderr
    assert f'{SOURCE_LABEL}="https://github.com/{{owner}}/glm53-dflash2-images"' in bare.stdout
    warning = [line for line in bare.stderr.splitlines() if line.startswith("warning: ")]
    assert warning == [
        f"warning: label {SOURCE_LABEL} is https://github.com/{{owner}}/glm53-dflash2-images, the placeholder "
        "{owner} unfilled (image.source; --owner or IMAGE_OWNER fills it; a push refuses it)"
    ]
    owned = invoke(["build", "--dry-run", "--recipe", recipe, "--owner", "acme"])
    assert owned.exit_code == 0, owned.stderr
    assert f'{SOURCE_LABEL}="https://github.com/acme/glm53-dflash2-images"' in owned.stdout
    assert "warning:" not in owned.stderr


def test_the_header_says_what_auto_resolved_to():
    # The drafter's config says "dtype": "bfloat16" and the recipe leaves its KV dtype at auto.
    result = invoke(["geometry", "--recipe", DEFAULT])
    assert result.exit_code == 0, result.stderr
    header = result.stdout.splitlines()[1]
    assert header.startswith("KV dtypes: target fp8, drafter auto (bfloat16, the drafter model's dtype); "), header


def test_a_dtype_the_recipe_names_is_printed_as_named(tmp_path):
    recipe = copy_recipe(tmp_path, set_key("serving.drafter_kv_cache_dtype", "fp8"))
    result = invoke(["geometry", "--recipe", recipe])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[1].startswith("KV dtypes: target fp8, drafter fp8; ")
