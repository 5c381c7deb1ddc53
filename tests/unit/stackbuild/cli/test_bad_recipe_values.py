"""Every class of bad input is one line naming the file, key or flag, a documented exit code, nothing written:
numbers, model configs and config files.

Each case breaks a copy of the default recipe (or its configs, or a command line) and runs ,
`build --dry-run` and `compose -o` on it (or the one command the case is about). Expected numbers are
worked out here by hand, not read from the code under test.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from bad_input_helpers import (
    edit_json,
    run_everywhere,
    with_base_digest,
)
from geometry_cases import kimi_linear_config
from recipe_copies import copy_recipe
from recipe_copies import set_key as _set

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
    recipe = copy_recipe(tmp_path, with_base_digest(_set(key, value)))
    if isinstance(value, float) and not math.isfinite(value):
        spelling = ".nan" if math.isnan(value) else ("-.inf" if value < 0 else ".inf")  # YAML's own
        assert f"{key.rsplit('.', 1)[1]}: {spelling}" in recipe.read_text()
    run_everywhere(tmp_path, recipe, 2, f"{recipe}: {key}: ", message)


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
    recipe = copy_recipe(tmp_path, with_base_digest())
    path = recipe.parent / "configs" / "drafter.config.json"
    path.write_text(path.read_text().replace('"sliding_window": 2048', f'"sliding_window": {token}'))
    run_everywhere(tmp_path, recipe, 2, f"{recipe}: drafter.config: configs/drafter.config.json: ", why)


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
    recipe = copy_recipe(tmp_path, with_base_digest())
    edit_json(recipe.parent / "configs" / f"{which}.config.json", edit)
    run_everywhere(tmp_path, recipe, 2, f"{recipe}: {which}.config: configs/{which}.config.json: {message}")


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
    recipe = copy_recipe(tmp_path, with_base_digest())
    damage(recipe.parent / "configs" / "target.config.json")
    run_everywhere(tmp_path, recipe, 2, f"{recipe}: target.config: {message}")


def test_config_duplicate_key(tmp_path):
    recipe = copy_recipe(tmp_path, with_base_digest())
    path = recipe.parent / "configs" / "drafter.config.json"
    path.write_text(
        path.read_text().replace('"num_key_value_heads": 8,', '"num_key_value_heads": 8, "num_key_value_heads": 0,')
    )
    run_everywhere(
        tmp_path,
        recipe,
        2,
        f"{recipe}: drafter.config: configs/drafter.config.json: duplicate key 'num_key_value_heads'",
    )
