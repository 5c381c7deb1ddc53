"""`build.py geometry --lengths PROMPT[:OUTPUT] --num-gpu-blocks-override N`: the requests-sent-together
section, stock and overlay, on the CPU hybrid test recipe; bad lengths refused in one line (exit 2)."""

from __future__ import annotations

import json

from bad_input_helpers import assert_refused, invoke
from support.repo import REPO

from geometry import AT_ONCE_DEFINITION

RECIPE = REPO / "tests" / "recipes" / "cpu-hybrid-dflash" / "recipe.yaml"  # max_model_len 1024


def test_the_section_has_both_behaviours_the_pool_and_the_definition():
    result = invoke(
        ["geometry", "--recipe", RECIPE, "--json", "--lengths", "500:100,600", "--num-gpu-blocks-override", 50]
    )
    data = json.loads(result.stdout)["requests_sent_together"]
    assert data["definition"] == AT_ONCE_DEFINITION and data["num_gpu_blocks_override"] == 50
    rows = [(r["behaviour"], r["prompt"], r["output"], r["num_blocks"]) for r in data["rows"]]
    # 600 alone: a prompt and an output making 600 tokens, the output a quarter of it.
    assert rows == [(b, p, o, 50) for b in ("stock", "overlay") for p, o in ((500, 100), (450, 150))]
    assert all(isinstance(r["requests"], int) and r["requests"] >= 1 for r in data["rows"])


def test_without_lengths_or_a_pool_the_report_has_no_such_section():
    result = invoke(["geometry", "--recipe", RECIPE, "--json"])
    assert "requests_sent_together" not in json.loads(result.stdout)


def test_a_length_longer_than_max_model_len_is_refused_in_one_line():
    result = invoke(["geometry", "--recipe", RECIPE, "--lengths", "1000:100"])
    assert_refused(result, 2, "--lengths", "max_model_len 1,024")


def test_a_length_that_is_not_tokens_is_refused_in_one_line():
    result = invoke(["geometry", "--recipe", RECIPE, "--lengths", "5x:1"])
    assert_refused(result, 2, "PROMPT[:OUTPUT]")
