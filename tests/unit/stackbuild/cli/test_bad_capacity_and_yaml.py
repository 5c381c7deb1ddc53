"""Every class of bad input is one line naming the file, key or flag, a documented exit code, nothing written:
capacity the gate refuses, gate inputs, YAML and extra arguments.

Each case breaks a copy of the default recipe (or its configs, or a command line) and runs ,
`build --dry-run` and `compose -o` on it (or the one command the case is about). Expected numbers are
worked out here by hand, not read from the code under test.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import default_recipe_figures as F
import pytest
from bad_input_helpers import (
    GIB,
    edit_json,
    invoke,
    run_everywhere,
    with_base_digest,
)
from geometry_cases import qwen3_next_target
from recipe_copies import TEST_DIGEST, copy_recipe
from recipe_copies import set_key as _set
from support.repo import REPO

# --- capacity ------------------------------------------------------------------------------------

# The default recipe with the overlay (tests/default_recipe_figures.py, which
# tests/unit/geometry/plan/test_simulate.py works out by hand and
# tests/agreement/test_overlay_planning_agreement.py holds to vLLM's planner): one block holds 9,216 tokens
# of every layer and costs 55,689,216 B.
_OVERLAY = F.OVERLAY
BLOCK_TOKENS = _OVERLAY.target_block
BLOCK_BYTES = _OVERLAY.bytes_per_block_with


def test_zero_blocks_fit(tmp_path):
    gib = 0.01
    memory = int(gib * GIB)  # 10,737,418 B < one block
    assert memory < BLOCK_BYTES
    recipe = copy_recipe(tmp_path, with_base_digest(_set("geometry.kv_cache_memory_gib", gib)))
    run_everywhere(
        tmp_path,
        recipe,
        5,
        f"{recipe}: geometry gate failed: ",
        f"no KV block fits: one block takes {BLOCK_BYTES:,} B and the KV cache has {memory:,} B",
    )


def test_max_model_len_above_the_pool(tmp_path):
    gib = 5
    blocks = gib * GIB // BLOCK_BYTES  # 96
    tokens = blocks * BLOCK_TOKENS  # 884,736 < 1,048,576
    needed = -(-1_048_576 // BLOCK_TOKENS)  # 114
    assert (blocks, tokens, needed) == (96, 884_736, 114)
    recipe = copy_recipe(tmp_path, with_base_digest(_set("geometry.kv_cache_memory_gib", gib)))
    run_everywhere(
        tmp_path,
        recipe,
        5,
        "one request of max_model_len 1,048,576 tokens needs at least 114 blocks of 9,216 tokens",
        "holds 96 blocks (884,736 tokens)",
    )


def test_drafter_heads_not_dividing_tp_fail_the_gate(tmp_path):
    """vLLM's Qwen3DFlashAttention asserts num_attention_heads % tensor_parallel_size == 0 when the drafter
    loads: 12 heads (4 KV heads, which divide them) over TP 8 cannot load, so the gate fails."""

    def edit(data):
        data["serving"]["tensor_parallel_size"] = 8
        data["drafter"].pop("config_sha256", None)  # the drafter config is edited below

    recipe = copy_recipe(tmp_path, with_base_digest(edit))
    edit_json(
        recipe.parent / "configs" / "drafter.config.json",
        lambda d: d.update(num_attention_heads=12, num_key_value_heads=4),
    )
    run_everywhere(tmp_path, recipe, 5, "drafter num_attention_heads not divisible by TP")


def test_max_model_len_above_max_position_embeddings(tmp_path):
    recipe = copy_recipe(tmp_path, with_base_digest(_set("serving.max_model_len", 2_000_000)))
    run_everywhere(
        tmp_path, recipe, 5, "max_model_len 2,000,000 is above the target's max_position_embeddings 1,048,576"
    )


def test_enough_capacity_passes(tmp_path):
    """The boundary: 114 blocks hold one 1,048,576-token request (114 * 9,216 = 1,050,624)."""
    gib = math.ceil(114 * BLOCK_BYTES / GIB * 1000) / 1000  # 5.913 GiB
    recipe = copy_recipe(tmp_path, with_base_digest(_set("geometry.kv_cache_memory_gib", gib)))
    result = invoke(["geometry", "--recipe", recipe, "--json"])
    assert result.exit_code == 0, result.stderr
    verdict = json.loads(result.stdout)["verdict"]
    assert verdict["passed"] and verdict["num_blocks_with"] == 114


def test_qwen3_next_target_without_head_dim(tmp_path):
    """transformers' Qwen3NextConfig reads a missing head_dim as 256, not hidden_size // num_attention_heads
    (2048 // 16 = 128 here): the gate refuses the config rather than plan the wrong head size."""

    def replace(d):
        d.clear()
        d.update(qwen3_next_target(random.Random(0)))
        d.pop("head_dim")

    def edit(data):
        data["target"].pop("config_sha256", None)  # the target config is replaced below
        data["serving"]["enable_prefix_caching"] = False  # "align" is not modelled for Qwen3-Next

    recipe = copy_recipe(tmp_path, with_base_digest(edit))
    edit_json(recipe.parent / "configs" / "target.config.json", replace)
    run_everywhere(
        tmp_path,
        recipe,
        2,
        f"{recipe}: target.config: configs/target.config.json: head_dim: required "
        "field is missing (transformers' Qwen3NextConfig then takes 256",
    )


def test_in_image_gate_refuses_bad_configs_and_capacity(tmp_path):
    """The gate script (stdlib, as in the image) runs the same checks: exit 2 for a config, 1 for capacity."""
    from stackbuild.core.gate import gate_input
    from stackbuild.core.recipe import load_recipe

    gate = gate_input(load_recipe(copy_recipe(tmp_path, with_base_digest()))).to_json()
    script = REPO / "geometry" / "sim_glm5_drafter_hades.py"

    def run(data):
        path = tmp_path / "gate-input.json"
        path.write_text(json.dumps(data))
        return subprocess.run(
            [sys.executable, str(script), "--input", str(path), "--behaviour", "overlay"],
            capture_output=True,
            text=True,
            timeout=120,
        )

    bad = json.loads(json.dumps(gate))
    bad["drafter_config"]["num_key_value_heads"] = 0
    proc = run(bad)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == "geometry gate: bad input: drafter config: num_key_value_heads: must be at least 1, got 0\n"
    small = dict(gate, kv_cache_memory_bytes=5 * GIB)
    proc = run(small)
    assert proc.returncode == 1, proc.stderr
    assert "holds 96 blocks (884,736 tokens)" in proc.stdout


# --- YAML ----------------------------------------------------------------------------------------

GATE_INPUTS = [
    ("fractional-max-model-len", {"max_model_len": 2.5}, "max_model_len must be a positive integer or null, got 2.5"),
    ("zero-max-model-len", {"max_model_len": 0}, "max_model_len must be a positive integer or null, got 0"),
    ("negative-max-model-len", {"max_model_len": -1}, "max_model_len must be a positive integer or null, got -1"),
    ("boolean-max-model-len", {"max_model_len": True}, "max_model_len must be a positive integer or null, got True"),
    ("boolean-block-size", {"block_size": True}, "block_size must be a positive integer or null, got True"),
]


@pytest.mark.parametrize("name,changes,message", GATE_INPUTS, ids=[c[0] for c in GATE_INPUTS])
def test_in_image_gate_refuses_bad_gate_inputs(tmp_path, name, changes, message):
    """A gate-input.json the build did not write (edited by hand): exit 2 and one line, never a traceback."""
    from stackbuild.core.gate import gate_input
    from stackbuild.core.recipe import load_recipe

    gate = dict(gate_input(load_recipe(copy_recipe(tmp_path, with_base_digest()))).to_json(), **changes)
    path = tmp_path / "gate-input.json"
    path.write_text(json.dumps(gate))
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "geometry" / "sim_glm5_drafter_hades.py"),
            "--input",
            str(path),
            "--behaviour",
            "overlay",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stderr) == (2, f"geometry gate: bad input: {message}\n")


def test_duplicate_yaml_key(tmp_path):
    text = (REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml").read_text()
    text = text.replace("  max_model_len: 1048576\n", "  max_model_len: 1048576\n  max_model_len: 4096\n")
    text += f"  digest: {TEST_DIGEST}\n".replace("  digest", "")  # keep the file otherwise intact
    recipe = copy_recipe(tmp_path, raw=text.rsplit("\n", 2)[0] + "\n")
    line = text.splitlines().index("  max_model_len: 4096") + 1
    run_everywhere(
        tmp_path,
        recipe,
        2,
        f"{recipe}: invalid YAML at line {line}: duplicate key 'max_model_len' (first at line {line - 1})",
    )


def test_duplicate_top_level_key(tmp_path):
    text = (REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml").read_text() + "name: other\n"
    recipe = copy_recipe(tmp_path, raw=text)
    run_everywhere(tmp_path, recipe, 2, "duplicate key 'name'")


@pytest.mark.parametrize("args", [["--enable-auto-tool-choice --enforce-eager"], ["--max-num-seqs 8"], ["  "]])
def test_extra_args_with_spaces(tmp_path, args):
    recipe = copy_recipe(tmp_path, with_base_digest(_set("serving.extra_args", args)))
    run_everywhere(
        tmp_path, recipe, 2, f"{recipe}: serving.extra_args[0]: ", "give each flag and each value as its own list item"
    )


def test_extra_args_value_with_spaces_after_equals_is_one_argument(tmp_path):
    """`--flag=a value` is one argv element for vLLM's parser: allowed, and kept whole."""
    from stackbuild.core.recipe import load_recipe
    from stackbuild.core.serve_args import serve_argv

    recipe = copy_recipe(
        tmp_path,
        with_base_digest(
            _set(
                "serving.extra_args",
                ["--chat-template-content-format=string", '--override-generation-config={"temperature": 0.6}'],
            )
        ),
    )
    argv = serve_argv(load_recipe(recipe))
    assert argv[-1] == '--override-generation-config={"temperature": 0.6}'
