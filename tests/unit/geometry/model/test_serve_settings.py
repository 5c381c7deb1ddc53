"""The one path from serve settings to the gate input (geometry/model/serve_settings.py,
geometry.model.inputs.build_inputs):
a flag given decides, a flag not given takes what applies without it, on the host as at container start."""

from __future__ import annotations

import dataclasses

from geometry_cases import recipe_configs

from geometry.model.inputs import build_inputs
from geometry.model.serve_settings import ServeDefaults, ServeSettings
from geometry.preflight.check import build_defaults
from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.gate import gate_input, serve_defaults
from stackbuild.core.gpus import serve_batched_tokens
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

TARGET, DRAFTER = recipe_configs()
DEFAULTS = ServeDefaults(
    nodes=1,
    capability_family=100,
    cpu_avx512_bf16=False,
    vllm_behaviour="overlay",
    kv_cache_memory_bytes=3 << 30,
    max_num_batched_tokens=16384,
    vllm_version=DEFAULT_VERSION,
)
UNSET = ServeSettings(
    tensor_parallel_size=1,
    kv_cache_dtype="auto",
    drafter_kv_cache_dtype=None,
    num_speculative_tokens=7,
    drafter_attention_backend="FLASH_ATTN",
    enable_prefix_caching=None,
    mamba_cache_mode=None,
    block_size=None,
    max_model_len=None,
    max_num_seqs=None,
    max_num_batched_tokens=None,
    kv_cache_memory_bytes=None,
    defaults=DEFAULTS,
)


def _inputs(settings: ServeSettings):
    return build_inputs(settings, target_config=TARGET, drafter_config=DRAFTER)


def test_a_flag_not_given_takes_what_applies_without_it():
    inputs = _inputs(UNSET)
    assert (inputs.max_num_batched_tokens, inputs.kv_cache_memory_bytes) == (16384, 3 << 30)
    assert (inputs.nodes, inputs.capability_family, inputs.vllm_behaviour) == (1, 100, "overlay")
    assert (inputs.enable_prefix_caching, inputs.mamba_cache_mode) == (True, "align")  # vLLM's default: on


def test_a_flag_given_decides():
    inputs = _inputs(
        dataclasses.replace(
            UNSET,
            max_num_batched_tokens=2048,
            kv_cache_memory_bytes=5 << 30,
            enable_prefix_caching=False,
            max_num_seqs=3,
        )
    )
    assert (inputs.max_num_batched_tokens, inputs.kv_cache_memory_bytes) == (2048, 5 << 30)
    assert (inputs.enable_prefix_caching, inputs.mamba_cache_mode, inputs.max_num_seqs) == (False, "none", 3)


def test_the_host_takes_the_gpus_batch_and_the_recipes_budget():
    recipe = load_recipe(DEFAULT_RECIPE)
    defaults = serve_defaults(recipe)
    assert defaults.max_num_batched_tokens == serve_batched_tokens(
        recipe.hardware.gpu, recipe.serving.tensor_parallel_size
    )
    assert defaults.kv_cache_memory_bytes == int(recipe.geometry.kv_cache_memory_gib * 2**30)
    assert defaults.capability_family == recipe.hardware.capability_family


def test_the_start_takes_the_builds_values_and_its_own_budget():
    built = gate_input(load_recipe(DEFAULT_RECIPE))
    defaults = build_defaults(built, 12345)
    assert defaults == dataclasses.replace(ServeDefaults.of(built), kv_cache_memory_bytes=12345)
    assert (defaults.nodes, defaults.capability_family, defaults.vllm_behaviour, defaults.max_num_batched_tokens) == (
        built.nodes,
        built.capability_family,
        built.vllm_behaviour,
        built.max_num_batched_tokens,
    )
