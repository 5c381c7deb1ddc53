"""Every class of bad input is one line naming the file, key or flag, a documented exit code, nothing written.

Each case breaks a copy of the default recipe (or its configs, or a command line) and runs
`geometry`, `build --dry-run` and `compose -o` on it (or the one command the case is about).
Expected numbers are worked out here by hand, not read from the code under test.
"""

from __future__ import annotations

import ast
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import default_recipe_figures as F
import pytest
import yaml
from bad_input_helpers import DEAD_DOCKER, DEFAULT_OUTPUT_DIRS, DIGEST, assert_refused, edit_json, invoke, snapshot
from geometry_cases import kimi_linear_config, qwen3_next_target
from recipe_copies import TEST_DIGEST, copy_recipe
from recipe_copies import set_key as _set
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild import cli as cli_module
from stackbuild.cli import gate as gate_commands

GIB = 1024**3
CHECK_COMMANDS = ("geometry", "build", "compose")


def _pinned(edit=None):
    def both(data):
        data["base"]["digest"] = TEST_DIGEST
        if edit:
            edit(data)

    return both


def _command(name: str, recipe: Path, out: Path) -> list:
    if name == "geometry":
        return ["geometry", "--recipe", recipe]
    if name == "build":  # an owner: no notice of the stand-in one on stderr, only the refusal
        return ["build", "--dry-run", "--owner", "acme", "--recipe", recipe]
    return ["compose", "--recipe", recipe, "-o", out, "--digest", DIGEST]


def _run_everywhere(tmp_path: Path, recipe: Path, code: int, *needles: str) -> None:
    """Each command (the dry run of the build included: it exits as the build would) refuses the same way
    and writes nothing (its -o included)."""
    out = tmp_path / "out.compose.yaml"
    before = snapshot(tmp_path, *DEFAULT_OUTPUT_DIRS)
    for name in CHECK_COMMANDS:
        line = assert_refused(invoke(_command(name, recipe, out)), code, *needles)
        assert not out.exists()
        assert snapshot(tmp_path, *DEFAULT_OUTPUT_DIRS) == before, name
    return line


# --- numbers -------------------------------------------------------------------------------------

NUMBERS = [
    ("nan", "geometry.kv_cache_memory_gib", float("nan"), "got number nan"),
    ("inf", "serving.gpu_memory_utilization", float("inf"), "got number inf"),
    ("negative-inf", "geometry.kv_cache_memory_gib", float("-inf"), "got number -inf"),
    ("huge-float", "geometry.kv_cache_memory_gib", 1e300, "got number 1e+300"),
    ("huge-integer", "serving.max_model_len", 10**30, "must be at most 9,007,199,254,740,992"),
    ("float-for-integer", "serving.port", 8000.0, "expected an integer, got number 8000.0"),
    ("float-for-tp", "serving.tensor_parallel_size", 1.5, "expected an integer, got number 1.5"),
    ("kv-memory-above-bound", "geometry.kv_cache_memory_gib", 2.0**21, "at most 1,048,576"),
    ("tp-above-bound", "serving.tensor_parallel_size", 2048, "from 1 to 1024, got 2048"),
    ("block-size-above-bound", "serving.block_size", 1 << 21, "from 1 to 1,048,576"),
    ("negative-block-size", "serving.block_size", -16, "got -16"),
]


@pytest.mark.parametrize("name,key,value,message", NUMBERS, ids=[n[0] for n in NUMBERS])
def test_numbers(tmp_path, name, key, value, message):
    recipe = copy_recipe(tmp_path, _pinned(_set(key, value)))
    if isinstance(value, float) and not math.isfinite(value):
        spelling = ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")  # YAML's own
        assert f"{key.rsplit('.', 1)[1]}: {spelling}" in recipe.read_text()
    _run_everywhere(tmp_path, recipe, 2, f"{recipe}: {key}: ", message)


CONFIG_NUMBERS = [
    (
        "float-heads",
        "drafter",
        lambda d: d.__setitem__("num_attention_heads", 32.0),
        "num_attention_heads: expected an integer, got number 32.0",
    ),
    (
        "boolean-layers",
        "target",
        lambda d: d.__setitem__("num_hidden_layers", True),
        "num_hidden_layers: expected an integer, got boolean true",
    ),
    (
        "string-rank",
        "target",
        lambda d: d.__setitem__("kv_lora_rank", "512"),
        "kv_lora_rank: expected an integer, got string '512'",
    ),
    (
        "huge-layers",
        "target",
        lambda d: d.__setitem__("num_hidden_layers", 10**9),
        "num_hidden_layers: must be at most 65,536",
    ),
]


@pytest.mark.parametrize(
    "token,why",
    [
        ("NaN", "NaN is not a number JSON allows"),
        ("Infinity", "Infinity is not a number JSON allows"),
        ("1" + "0" * 30, "is too large"),
        ("1e999", "is out of range"),
    ],
)
def test_config_numbers_json_refuses(tmp_path, token, why):
    recipe = copy_recipe(tmp_path, _pinned())
    path = recipe.parent / "configs" / "drafter.config.json"
    path.write_text(path.read_text().replace('"sliding_window": 2048', f'"sliding_window": {token}'))
    _run_everywhere(tmp_path, recipe, 2, f"{recipe}: drafter.config: configs/drafter.config.json: ", why)


# --- model configs -------------------------------------------------------------------------------


def _kimi_linear(edit):
    """Replace the target with a Kimi Linear config (27 layers), then ``edit`` its linear_attn_config."""

    def replace(d):
        d.clear()
        d.update(kimi_linear_config())
        edit(d["linear_attn_config"])

    return replace


def _llama(d):
    d.clear()
    d.update(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "hidden_size": 4096,
            "max_position_embeddings": 131072,
        }
    )


MODEL_CONFIGS = [
    ("llama-target", "target", _llama, "architectures: LlamaForCausalLM is not modelled by the geometry gate"),
    (
        "llama-architecture-glm-type",
        "target",
        lambda d: d.__setitem__("architectures", ["LlamaForCausalLM"]),
        "architectures: LlamaForCausalLM is not modelled",
    ),
    (
        "drafter-zero-kv-heads",
        "drafter",
        lambda d: d.__setitem__("num_key_value_heads", 0),
        "num_key_value_heads: must be at least 1, got 0",
    ),
    (
        "drafter-negative-kv-heads",
        "drafter",
        lambda d: d.__setitem__("num_key_value_heads", -8),
        "num_key_value_heads: must be at least 1, got -8",
    ),
    (
        "drafter-kv-heads-not-dividing",
        "drafter",
        lambda d: d.__setitem__("num_key_value_heads", 5),
        "num_key_value_heads: 5 does not divide num_attention_heads 32",
    ),
    (
        "zero-block-size",
        "drafter",
        lambda d: d["dflash_config"].__setitem__("block_size", 0),
        "dflash_config.block_size: must be at least 2, got 0",
    ),
    (
        "negative-block-size",
        "drafter",
        lambda d: d["dflash_config"].__setitem__("block_size", -8),
        "dflash_config.block_size: must be at least 2, got -8",
    ),
    ("no-dflash-config", "drafter", lambda d: d.pop("dflash_config"), "dflash_config: required field is missing"),
    (
        "target-layer-types-length",
        "target",
        lambda d: d.__setitem__("num_hidden_layers", 44),
        "layer_types: has 45 entries but num_hidden_layers is 44",
    ),
    (
        "drafter-layer-types-length",
        "drafter",
        lambda d: d["layer_types"].pop(),
        "layer_types: has 4 entries but num_hidden_layers is 5",
    ),
    (
        "unknown-layer-type",
        "target",
        lambda d: d["layer_types"].__setitem__(3, "mystery_attention"),
        "layer_types[3]: must be one of: linear_attention, indexed_attention; got string 'mystery_attention'",
    ),
    ("missing-kv-lora-rank", "target", lambda d: d.pop("kv_lora_rank"), "kv_lora_rank: required field is missing"),
    (
        "missing-linear-heads",
        "target",
        lambda d: d.pop("linear_num_heads"),
        "linear_num_heads: required field is missing",
    ),
    (
        "missing-drafter-layers",
        "drafter",
        lambda d: d.pop("num_hidden_layers"),
        "num_hidden_layers: required field is missing",
    ),
    (
        "missing-drafter-heads",
        "drafter",
        lambda d: d.pop("num_attention_heads"),
        "num_attention_heads: required field is missing",
    ),
    # transformers' Qwen3Config (the drafter's model_type) fills these with 32 and 128, not
    # num_attention_heads and hidden_size // num_attention_heads.
    (
        "missing-drafter-kv-heads",
        "drafter",
        lambda d: d.pop("num_key_value_heads"),
        "num_key_value_heads: required field is missing (vLLM would take the default of the drafter's transformers "
        "config class, which the gate does not model)",
    ),
    (
        "missing-drafter-head-dim",
        "drafter",
        lambda d: d.pop("head_dim"),
        "head_dim: required field is missing (vLLM would take the default",
    ),
    (
        "null-drafter-head-dim",
        "drafter",
        lambda d: d.__setitem__("head_dim", None),
        "head_dim: expected an integer, got null",
    ),
    # No target attention layer (listed, or by the every-4th-layer pattern): nothing for the drafter to fit.
    (
        "target-without-attention",
        "target",
        lambda d: d.__setitem__("layer_types", ["linear_attention"] * len(d["layer_types"])),
        "layer_types: has no indexed_attention layer: the target needs an attention layer, whose KV page the "
        "drafter's pages must fit",
    ),
    (
        "target-too-few-layers-for-attention",
        "target",
        lambda d: (d.pop("layer_types"), d.__setitem__("num_hidden_layers", 3)),
        "num_hidden_layers: with 3 layers and every 4th one attention, none is: the target needs an attention layer",
    ),
    # vLLM reads a Kimi Linear layer's kind from kda_layers alone: listing every layer there leaves no
    # attention layer, whatever full_attn_layers says.
    (
        "kimi-every-layer-kda",
        "target",
        _kimi_linear(lambda lac: lac.__setitem__("kda_layers", list(range(1, 28)))),
        "linear_attn_config.kda_layers: lists all 27 layers, so none is attention (a layer's kind is read from "
        "kda_layers alone): the target needs an attention layer",
    ),
    (
        "no-architecture-unknown-type",
        "target",
        lambda d: (d.pop("architectures"), d.__setitem__("model_type", "gpt2")),
        "architectures: missing, and model_type 'gpt2' is not modelled",
    ),
]


CONFIG_CASES = CONFIG_NUMBERS + MODEL_CONFIGS
assert len({c[0] for c in CONFIG_CASES}) == len(CONFIG_CASES)


@pytest.mark.parametrize("name,which,edit,message", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_config_refused(tmp_path, name, which, edit, message):
    """A bad number or field in a model config: one line naming the config file and key, exit 2."""
    recipe = copy_recipe(tmp_path, _pinned())
    edit_json(recipe.parent / "configs" / f"{which}.config.json", edit)
    _run_everywhere(tmp_path, recipe, 2, f"{recipe}: {which}.config: configs/{which}.config.json: {message}")


def _binary(config: Path) -> None:
    config.write_bytes(bytes(range(256)) * 4)


def _empty(config: Path) -> None:
    config.write_bytes(b"")


def _directory(config: Path) -> None:
    config.unlink()
    config.mkdir()


def _symlink_loop(config: Path) -> None:
    config.unlink()
    config.symlink_to(config.name)


def _symlink_out(config: Path) -> None:
    outside = config.parent.parent.parent / "elsewhere.json"
    outside.write_text(config.read_text())
    config.unlink()
    config.symlink_to(outside)


CONFIG_FILES = [
    ("binary", _binary, "configs/target.config.json is not UTF-8 text (a binary file?)"),
    ("empty", _empty, "configs/target.config.json is empty"),
    ("directory", _directory, "configs/target.config.json is a directory, not a config.json"),
    ("symlink-loop", _symlink_loop, "configs/target.config.json: symlink loop"),
    ("symlink-leaving", _symlink_out, "configs/target.config.json leaves the recipe's directory"),
]


@pytest.mark.parametrize("name,damage,message", CONFIG_FILES, ids=[c[0] for c in CONFIG_FILES])
def test_config_files(tmp_path, name, damage, message):
    recipe = copy_recipe(tmp_path, _pinned())
    damage(recipe.parent / "configs" / "target.config.json")
    _run_everywhere(tmp_path, recipe, 2, f"{recipe}: target.config: {message}")


def test_config_duplicate_key(tmp_path):
    recipe = copy_recipe(tmp_path, _pinned())
    path = recipe.parent / "configs" / "drafter.config.json"
    path.write_text(
        path.read_text().replace('"num_key_value_heads": 8,', '"num_key_value_heads": 8, "num_key_value_heads": 0,')
    )
    _run_everywhere(
        tmp_path,
        recipe,
        2,
        f"{recipe}: drafter.config: configs/drafter.config.json: duplicate key 'num_key_value_heads'",
    )


# --- recipe paths and names ----------------------------------------------------------------------


def test_config_path_leaving_the_recipe_directory(tmp_path):
    recipe = copy_recipe(tmp_path, _pinned(_set("target.config", "../outside.json")))
    (recipe.parent.parent / "outside.json").write_text((recipe.parent / "configs" / "target.config.json").read_text())
    _run_everywhere(tmp_path, recipe, 2, f"{recipe}: target.config: ../outside.json leaves the recipe's directory")


def test_absolute_config_path(tmp_path):
    absolute = str(REPO / "recipes" / "glm53-flash-dflash2-gb300" / "configs" / "target.config.json")
    recipe = copy_recipe(tmp_path, _pinned(_set("target.config", absolute)))
    _run_everywhere(tmp_path, recipe, 2, f"{recipe}: target.config: must be relative to the recipe's directory")


RECIPE_PATHS = [
    (
        "series-traversal",
        "overlay.series",
        f"../series/vllm-{DEFAULT_VERSION}",
        "overlay.series: must be the name of a directory in overlay/series/",
    ),
    ("series-absolute", "overlay.series", "/etc", "overlay.series: must be the name of a directory"),
    ("name-traversal", "name", "../../compose/evil", "name: must be a safe file name"),
    ("name-with-slash", "name", "a/b", "name: must be a safe file name"),
    ("name-with-space", "name", "glm 53", "name: must be a safe file name"),
    ("name-hidden-file", "name", ".compose", "name: must be a safe file name"),
]


@pytest.mark.parametrize("name,key,value,message", RECIPE_PATHS, ids=[c[0] for c in RECIPE_PATHS])
def test_recipe_paths_and_names(tmp_path, name, key, value, message):
    recipe = copy_recipe(tmp_path, _pinned(_set(key, value)))
    _run_everywhere(tmp_path, recipe, 2, f"{recipe}: {message}")


# --- image references ----------------------------------------------------------------------------

REFERENCES = [
    ("repository-uppercase", "image.repository", "ghcr.io/{owner}/GLM53", "must be lowercase"),
    ("repository-space", "image.repository", "ghcr.io/{owner}/glm 53", "invalid reference format"),
    ("repository-with-tag", "image.repository", "ghcr.io/{owner}/glm53:latest", "give the repository only"),
    ("repository-double-separator", "image.repository", "ghcr.io/{owner}/glm..53", "invalid reference format"),
    ("repository-too-long", "image.repository", "ghcr.io/{owner}/" + "a" * 260, "must not be more than 255 characters"),
    ("repository-uppercase-digest", "image.repository", "ghcr.io/{owner}/glm53@sha256:" + "A" * 64, "(invalid digest;"),
    ("base-uppercase", "base.image", "VLLM/vllm-openai", "must be lowercase"),
    ("base-space", "base.image", "vllm/vllm openai", "invalid reference format"),
    ("base-tag-space", "base.tag", f"v{DEFAULT_VERSION} rc", "not a valid image tag"),
    ("tag-uppercase-allowed-but-space-not", "image.tags", ["latest", "GB 300"], "image.tags[1]: not a valid image tag"),
    ("tag-too-long", "image.tags", ["x" * 129], "image.tags[0]: not a valid image tag"),
    ("tag-bad-placeholder", "image.tags", ["{date.year}"], "image.tags[0]: unknown placeholder"),
]


@pytest.mark.parametrize("name,key,value,message", REFERENCES, ids=[c[0] for c in REFERENCES])
def test_image_references(tmp_path, name, key, value, message):
    recipe = copy_recipe(tmp_path, _pinned(_set(key, value)))
    _run_everywhere(tmp_path, recipe, 2, f"{recipe}: {key.split('.')[0]}.", message)


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--repository", "127.0.0.1:5000/Me/glm"],
            "--repository: '127.0.0.1:5000/Me/glm' is not a valid image repository",
        ),
        (["--repository", "ghcr.io/me/glm:tag"], "--repository: give the repository only"),
        (["--owner", "Acme Corp"], "--owner 'Acme Corp': not a valid registry namespace"),
    ],
)
def test_reference_overrides(tmp_path, args, message):
    recipe = copy_recipe(tmp_path, _pinned())
    for command in (["build", "--dry-run"], ["render"]):
        assert_refused(invoke([*command, "--recipe", recipe, *args]), 2, message)


@pytest.mark.parametrize(
    "args,env,line",
    [
        (
            ["--owner", "Acme"],
            {},
            "error: --owner 'Acme': not a valid registry namespace "
            "(lowercase letters, digits, and . _ - between them); use 'acme'",
        ),
        (["--owner", "Acme Corp"], {}, "; use 'acme-corp'"),
        ([], {"IMAGE_OWNER": "Acme"}, "error: IMAGE_OWNER (environment) 'Acme': not a valid registry namespace"),
    ],
)
def test_an_owner_is_blamed_where_it_came_from_with_a_fix(tmp_path, args, env, line):
    recipe = copy_recipe(tmp_path, _pinned())
    done = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "build", "--dry-run", "--recipe", str(recipe), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, **env},
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert line in done.stderr and "recipe.yaml" not in done.stderr


# --- capacity ------------------------------------------------------------------------------------

# The default recipe with the overlay (tests/default_recipe_figures.py, which test_geometry.py works
# out by hand and test_overlay_planning.py holds to vLLM's planner): one block holds 9,216 tokens
# of every layer and costs 55,689,216 B.
_OVERLAY = F.OVERLAY
BLOCK_TOKENS = _OVERLAY.target_block
BLOCK_BYTES = _OVERLAY.bytes_per_block_with


def test_zero_blocks_fit(tmp_path):
    gib = 0.01
    memory = int(gib * GIB)  # 10,737,418 B < one block
    assert memory < BLOCK_BYTES
    recipe = copy_recipe(tmp_path, _pinned(_set("geometry.kv_cache_memory_gib", gib)))
    _run_everywhere(
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
    recipe = copy_recipe(tmp_path, _pinned(_set("geometry.kv_cache_memory_gib", gib)))
    _run_everywhere(
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

    recipe = copy_recipe(tmp_path, _pinned(edit))
    edit_json(
        recipe.parent / "configs" / "drafter.config.json",
        lambda d: d.update(num_attention_heads=12, num_key_value_heads=4),
    )
    _run_everywhere(tmp_path, recipe, 5, "drafter num_attention_heads not divisible by TP")


def test_max_model_len_above_max_position_embeddings(tmp_path):
    recipe = copy_recipe(tmp_path, _pinned(_set("serving.max_model_len", 2_000_000)))
    _run_everywhere(
        tmp_path, recipe, 5, "max_model_len 2,000,000 is above the target's max_position_embeddings 1,048,576"
    )


def test_enough_capacity_passes(tmp_path):
    """The boundary: 114 blocks hold one 1,048,576-token request (114 * 9,216 = 1,050,624)."""
    gib = math.ceil(114 * BLOCK_BYTES / GIB * 1000) / 1000  # 5.913 GiB
    recipe = copy_recipe(tmp_path, _pinned(_set("geometry.kv_cache_memory_gib", gib)))
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

    recipe = copy_recipe(tmp_path, _pinned(edit))
    edit_json(recipe.parent / "configs" / "target.config.json", replace)
    _run_everywhere(
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

    gate = gate_input(load_recipe(copy_recipe(tmp_path, _pinned()))).to_json()
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

    gate = dict(gate_input(load_recipe(copy_recipe(tmp_path, _pinned()))).to_json(), **changes)
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
    _run_everywhere(
        tmp_path,
        recipe,
        2,
        f"{recipe}: invalid YAML at line {line}: duplicate key 'max_model_len' (first at line {line - 1})",
    )


def test_duplicate_top_level_key(tmp_path):
    text = (REPO / "recipes" / "glm53-flash-dflash2-gb300" / "recipe.yaml").read_text() + "name: other\n"
    recipe = copy_recipe(tmp_path, raw=text)
    _run_everywhere(tmp_path, recipe, 2, "duplicate key 'name'")


@pytest.mark.parametrize("args", [["--enable-auto-tool-choice --enforce-eager"], ["--max-num-seqs 8"], ["  "]])
def test_extra_args_with_spaces(tmp_path, args):
    recipe = copy_recipe(tmp_path, _pinned(_set("serving.extra_args", args)))
    _run_everywhere(
        tmp_path, recipe, 2, f"{recipe}: serving.extra_args[0]: ", "give each flag and each value as its own list item"
    )


def test_extra_args_value_with_spaces_after_equals_is_one_argument(tmp_path):
    """`--flag=a value` is one argv element for vLLM's parser: allowed, and kept whole."""
    from stackbuild.core.recipe import load_recipe
    from stackbuild.core.serve_args import serve_argv

    recipe = copy_recipe(
        tmp_path,
        _pinned(
            _set(
                "serving.extra_args",
                ["--chat-template-content-format=string", '--override-generation-config={"temperature": 0.6}'],
            )
        ),
    )
    argv = serve_argv(load_recipe(recipe))
    assert argv[-1] == '--override-generation-config={"temperature": 0.6}'


# --- outputs -------------------------------------------------------------------------------------


def _git_checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    (checkout / "notes.md").write_text("tracked\n")
    subprocess.run(["git", "-C", str(checkout), "add", "notes.md"], check=True)
    subprocess.run(
        ["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "x"], check=True
    )
    return checkout


@pytest.mark.parametrize("command", ["render", "compose"])
def test_output_into_a_missing_directory(tmp_path, command):
    recipe = copy_recipe(tmp_path, _pinned())
    out = tmp_path / "missing" / "out.txt"
    args = [command, "--recipe", recipe, "-o", out] + (["--digest", DIGEST] if command == "compose" else [])
    assert_refused(invoke(args), 15, f"-o {out}: directory {out.parent} does not exist")
    assert not out.parent.exists()


@pytest.mark.parametrize("command", ["render", "compose"])
def test_output_unwritable(tmp_path, command):
    recipe = copy_recipe(tmp_path, _pinned())
    out = Path("/proc/glm53-out.txt")  # not writable, even for root
    args = [command, "--recipe", recipe, "-o", out] + (["--digest", DIGEST] if command == "compose" else [])
    assert_refused(invoke(args), 15, f"-o {out}: ")


@pytest.mark.parametrize("command", ["render", "compose"])
def test_output_is_a_directory(tmp_path, command):
    """An output path (exit 15, as the documents' table says), in one line; a one-node compose says to name a file."""
    recipe = copy_recipe(tmp_path, _pinned())
    args = [command, "--recipe", recipe, "-o", tmp_path] + (["--digest", DIGEST] if command == "compose" else [])
    assert_refused(invoke(args), 15, f"-o {tmp_path}: is a directory")


@pytest.mark.parametrize("command", ["render", "compose"])
def test_output_over_a_tracked_file(tmp_path, command):
    recipe = copy_recipe(tmp_path, _pinned())
    tracked = _git_checkout(tmp_path) / "notes.md"
    args = [command, "--recipe", recipe, "-o", tracked] + (["--digest", DIGEST] if command == "compose" else [])
    assert_refused(invoke(args), 15, f"-o {tracked}: git tracks this file and it is not this command's output")
    assert tracked.read_text() == "tracked\n"


def test_render_replaces_its_own_tracked_output(tmp_path):
    recipe = copy_recipe(tmp_path, _pinned())
    checkout = _git_checkout(tmp_path)
    dockerfile = checkout / "Dockerfile"
    assert invoke(["render", "--recipe", recipe, "-o", dockerfile]).exit_code == 0
    subprocess.run(["git", "-C", str(checkout), "add", "Dockerfile"], check=True)
    result = invoke(["render", "--recipe", recipe, "-o", dockerfile])
    assert result.exit_code == 0, result.stderr
    other = copy_recipe(tmp_path / "other", _pinned(_set("name", "another-recipe")))
    assert_refused(invoke(["render", "--recipe", other, "-o", dockerfile]), 15, "git tracks this file")


# --- commands and flags --------------------------------------------------------------------------


def test_verify_with_a_tag_is_a_usage_error(tmp_path):
    recipe = copy_recipe(tmp_path, _pinned())
    assert_refused(
        invoke(["verify", "ghcr.io/acme/glm:latest", "--recipe", recipe]),
        2,
        "verify ghcr.io/acme/glm:latest: give the image by digest",
    )
    assert_refused(
        invoke(["verify", "ghcr.io/acme/glm@sha256:zz", "--recipe", recipe]),
        2,
        "verify ghcr.io/acme/glm@sha256:zz: not an image reference (invalid reference format); "
        "give the image by digest",
    )


def test_qualify_attach_needs_a_digest_reference_before_anything_is_measured():
    # Nothing listens at the URL: a measurement would exit 20 (server unreachable); the reference is refused first.
    for reference, needle in (
        ("127.0.0.1:5000/acme/glm:latest", "give the image by digest"),
        ("127.0.0.1:5000/acme/glm@sha256:abc", "not an image reference"),
        ("127.0.0.1:5000/acme/glm", "give the image by digest"),
    ):
        assert_refused(
            invoke(["qualify", "--url", "http://127.0.0.1:1", "--attach", reference]),
            2,
            f"qualify --attach {reference}: {needle}",
        )
    result = invoke(["qualify", "--url", "http://127.0.0.1:1", "--attach", "glm:latest", "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["exit_code"] == 2


def test_usage_errors_are_one_line(tmp_path):
    assert_refused(
        invoke(["build", "--frobnicate"]), 2, "build.py build: No such option '--frobnicate'", "build --help"
    )
    assert_refused(invoke(["compose", "--port", "eighty"]), 2, "'--port'")
    assert_refused(invoke(["geometry", "--recipe", tmp_path]), 2, "--recipe")
    assert_refused(invoke(["frobnicate"]), 2, "build.py: No such command 'frobnicate'")
    assert_refused(invoke(["--frobnicate"]), 2, "build.py: No such option '--frobnicate'")


def test_a_real_process_prints_one_line_and_no_traceback(tmp_path):
    """The same refusal from a real `python build.py` process (exit code and stderr as a user sees them)."""
    recipe = copy_recipe(tmp_path, _pinned(_set("geometry.kv_cache_memory_gib", float("nan"))))
    proc = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "geometry", "--recipe", str(recipe)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DOCKER_HOST": DEAD_DOCKER},
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"error: {recipe}: geometry.kv_cache_memory_gib: expected a finite number of at most "
        "9,007,199,254,740,992, got number nan\n"
    )


def _message_strings(path: Path):
    """String constants (and f-string pieces) with a space, docstrings left out: the text of messages."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and " " in node.value
            and id(node) not in docstrings
        ):
            yield node.value


def test_no_message_suggests_a_flag_that_does_not_exist():
    import re

    from stackbuild.core.serve_flags import GENERATED_FLAGS

    ours = {
        opt
        for command in cli_module.cli.commands.values()
        for param in command.params
        for opt in (*param.opts, *param.secondary_opts)
    } | {"--help"}
    vllms = set(GENERATED_FLAGS) | {"--api-key"}  # named where a message talks about vLLM's own command line
    others = {"--short"}  # `docker compose version --short`, named where a message quotes that command
    sources = sorted((REPO / "stackbuild").rglob("*.py"))
    unknown = set()
    for source in sources:
        for text in _message_strings(source):
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text):
                if flag not in ours | vllms | others:
                    unknown.add(f"{source.name}: {flag} in {text[:80]!r}")
    assert not unknown


# --- owners and serving defaults -----------------------------------------------------------------


def test_push_without_an_owner_is_refused(tmp_path):
    recipe = copy_recipe(tmp_path, _pinned())
    for args in (["build", "--push"], ["push"]):
        assert_refused(
            invoke([*args, "--recipe", recipe]),
            2,
            "image.repository: ghcr.io/{owner}/glm53-flash-dflash2-gb300 has no owner to push to: "
            "pass --owner or set IMAGE_OWNER",
        )


def test_a_build_without_an_owner_says_so(tmp_path):
    recipe = copy_recipe(tmp_path, _pinned())
    result = invoke(["build", "--dry-run", "--recipe", recipe])
    assert result.exit_code == 0, result.stderr
    assert result.stderr == (
        "notice: no image owner (--owner, IMAGE_OWNER): naming the image "
        "ghcr.io/local/glm53-flash-dflash2-gb300; it stays in this engine (a push needs an owner)\n"
        "warning: label org.opencontainers.image.source is https://github.com/{owner}/glm53-dflash2-images, "
        "the placeholder {owner} unfilled (image.source; --owner or IMAGE_OWNER fills it; a push refuses it)\n"
    )
    result = invoke(["build", "--dry-run", "--recipe", recipe], IMAGE_OWNER="acme")
    assert result.exit_code == 0 and result.stderr == ""
    assert "ghcr.io/acme/glm53-flash-dflash2-gb300:latest" in result.stdout


def test_make_image_refuses_to_push_without_an_owner():
    env = {k: v for k, v in os.environ.items() if k != "IMAGE_OWNER"}
    proc = subprocess.run(
        ["make", "-C", str(REPO), "--no-print-directory", "owner", "PUSH=1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode != 0
    assert (
        "make image: no image owner to push to: set IMAGE_OWNER=your-namespace (or PUSH=0 to build without pushing)"
        in proc.stderr
    )
    proc = subprocess.run(
        ["make", "-C", str(REPO), "--no-print-directory", "owner", "PUSH=1", "IMAGE_OWNER=acme"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "image owner: acme (IMAGE_OWNER)\n"


def test_committed_compose_file_has_no_placeholder_owner():
    text = (REPO / "compose" / "glm53-flash-dflash2-gb300.compose.yaml").read_text()
    image = yaml.safe_load(text)["services"]["vllm"]["image"]
    assert "/local/" not in image and "OWNER" not in image.replace("${IMAGE_OWNER:?set IMAGE_OWNER", "")
    assert image.startswith(
        "ghcr.io/${IMAGE_OWNER:?set IMAGE_OWNER to the registry namespace the image was pushed to}/"
    )


def _report(path: Path, **fields) -> Path:
    data = {
        "recipe_name": "glm53-flash-dflash2-gb300",
        "image": "ghcr.io/acme/glm53-flash-dflash2-gb300",
        "pushed_digest": DIGEST,
        "tags": ["latest", "sm100-gb300-20251130"],
        "status": "pushed",
    }
    data.update(fields)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "fields,pinned,notice",
    [
        ({}, True, "image owner 'acme' taken from {report}"),
        (
            {"recipe_name": "other"},
            False,
            "unpinned: {report} is the report of recipe 'other', not 'glm53-flash-dflash2-gb300'",
        ),
        ({"pushed_digest": None, "status": "built"}, False, "unpinned: {report} records no push (status 'built')"),
        (
            {"pushed_digest": "sha256:abc"},
            False,
            "unpinned: {report}: pushed_digest 'sha256:abc' is not a sha256 digest",
        ),
    ],
)
def test_compose_takes_the_digest_from_a_matching_report_or_says_why_not(tmp_path, fields, pinned, notice):
    from stackbuild.core.recipe import load_recipe
    from stackbuild.serve.image_pin import resolve_image

    recipe = load_recipe(copy_recipe(tmp_path, _pinned()))
    report = _report(tmp_path / "report.json", **fields)
    pin = resolve_image(recipe, owner="acme" if fields else None, report_path=report)
    assert bool(pin.digest) is pinned
    text = notice.format(report=report)
    if text.startswith("unpinned: "):
        assert pin.unpinned_because == text[len("unpinned: ") :]
    else:
        assert (
            pin.owner_note == text
            and pin.reference == f"ghcr.io/acme/glm53-flash-dflash2-gb300:sm100-gb300-20251130@{DIGEST}"
        )


def test_compose_without_a_report_says_why_it_is_unpinned(tmp_path):
    from stackbuild.core.recipe import load_recipe
    from stackbuild.serve.image_pin import resolve_image

    recipe = load_recipe(copy_recipe(tmp_path, _pinned()))
    pin = resolve_image(recipe, owner="acme", report_path=tmp_path / "none.json")
    assert pin.digest is None
    assert (
        pin.unpinned_because
        == f"no readable build report at {tmp_path / 'none.json'} (pass --digest, or build and push first)"
    )


@pytest.mark.parametrize("host_ip", [None, "0.0.0.0", "::1"])
def test_served_port_binds_loopback_unless_the_recipe_asks(tmp_path, host_ip):
    from stackbuild.core.recipe import load_recipe
    from stackbuild.serve.compose import render_compose

    edit = _set("serving.host_ip", host_ip) if host_ip else None
    recipe = load_recipe(copy_recipe(tmp_path, _pinned(edit)))
    doc = yaml.safe_load(render_compose(recipe, owner="acme", digest=DIGEST, report_path=tmp_path / "none.json"))
    assert doc["services"]["vllm"]["ports"][0]["host_ip"] == (host_ip or "127.0.0.1")


def test_bad_host_ip(tmp_path):
    recipe = copy_recipe(tmp_path, _pinned(_set("serving.host_ip", "localhost")))
    _run_everywhere(tmp_path, recipe, 2, f"{recipe}: serving.host_ip: must be an IP address")


def test_api_key_comes_from_the_env_file(tmp_path):
    """vLLM reads VLLM_API_KEY when --api-key is absent; the compose file loads the env file, never inlines it."""
    from stackbuild.core.recipe import load_recipe
    from stackbuild.serve.compose import render_compose
    from stackbuild.serve.compose_service import env_file_name

    source = (
        REPO / ".cache" / f"vllm-{DEFAULT_VERSION}" / "vllm" / "entrypoints" / "serve" / "middleware" / "register.py"
    )
    if source.exists():
        assert "args.api_key or [envs.VLLM_API_KEY]" in source.read_text()
    recipe = load_recipe(copy_recipe(tmp_path, _pinned()))
    text = render_compose(recipe, owner="acme", digest=DIGEST, report_path=tmp_path / "none.json")
    svc = yaml.safe_load(text)["services"]["vllm"]
    assert svc["env_file"] == [{"path": env_file_name(recipe), "required": False}]
    assert "VLLM_API_KEY" not in svc["environment"] and "--api-key" not in svc["command"]
    assert "#   VLLM_API_KEY=... there makes vLLM require that key" in text
    # A recipe cannot inline one: secret-looking env names are refused.
    bad = copy_recipe(tmp_path / "bad", _pinned(_set("serving.env", {"VLLM_API_KEY": "x"})))
    assert_refused(invoke(["geometry", "--recipe", bad]), 2, "serving.env.VLLM_API_KEY: looks like a secret")


def test_an_unexpected_exception_is_one_line_with_its_own_code(monkeypatch, tmp_path):
    """The last resort (exit 70): an exception the driver did not expect, injected here, never a traceback."""

    def broken(path):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(gate_commands, "load_recipe", broken)
    assert_refused(
        invoke(["geometry", "--recipe", tmp_path / "r.yaml"]),
        70,
        "error: internal error: ZeroDivisionError: division by zero; please report it",
    )
