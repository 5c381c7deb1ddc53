"""What the start-time check reads of the mounted models beside their shards
(geometry/preflight/mounted.py): the quantization and the drafter's precision, the drafter's
wiring to its target, the tokenizer a served parser needs; and the same checks from `build.py
preflight` on the host and on the slow path (vLLM's serve parser on an edited argv).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from models_support import (
    DRAFTER_DIR,
    TARGET_DIR,
    cache_models_dir,
    models_dir,
    safetensors_bytes,
)
from support.mounted_checks import CHECKED, RECIPE, fake_nvidia_smi, no_gpu, pinned, refused_with, run  # noqa: F401
from support.repo import REPO
from support.warm_preflight import build_py_preflight

from geometry.preflight.configs import read_config
from geometry.preflight.mounted import CheckpointMismatch, check_wiring

SHARD1 = "model-00001-of-00002.safetensors"


# --- quantization and precision ---------------------------------------------------------------


def test_another_quantization_than_the_recipes_is_exit_19(tmp_path):
    models = models_dir(tmp_path / "models")
    quant = models / TARGET_DIR / "hf_quant_config.json"
    data = json.loads(quant.read_text())
    data["quantization"]["quant_algo"] = "FP8"
    quant.write_text(json.dumps(data))
    assert refused_with(run(models), 26) == (
        f"{quant} quantization.quant_algo FP8: the target is modelopt, the recipe's target.quantization is modelopt_fp4"
    )


def test_an_unquantized_target_is_not_the_nvfp4_one(tmp_path):
    models = models_dir(tmp_path / "models")
    (models / TARGET_DIR / "hf_quant_config.json").unlink()
    assert refused_with(run(models), 26) == (
        f"{models / TARGET_DIR} has no hf_quant_config.json and config.json no quantization_config: the target is "
        "none, the recipe's target.quantization is modelopt_fp4"
    )


def test_a_recipe_that_states_no_quantization_does_not_check_it(tmp_path):
    models = models_dir(tmp_path / "models")
    (models / TARGET_DIR / "hf_quant_config.json").unlink()
    assert run(models, replace(CHECKED, target=replace(CHECKED.target, quantization=None))).passed


def test_quantization_config_and_hf_quant_config_must_agree(tmp_path):
    from geometry.preflight.mounted import target_quantization

    models = models_dir(tmp_path / "models")
    config = read_config("target", str(models / TARGET_DIR), "/models/x")
    data = dict(config.data, quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4"})
    assert target_quantization(str(models / TARGET_DIR), replace(config, data=data))[0] == "modelopt_fp4"
    data["quantization_config"] = {"quant_method": "fp8"}
    with pytest.raises(
        CheckpointMismatch,
        match=r"the target's quantization files disagree: .*hf_quant_config.json "
        r"quantization.quant_algo NVFP4 is modelopt_fp4, .* is fp8$",
    ):
        target_quantization(str(models / TARGET_DIR), replace(config, data=data))


def test_a_drafter_with_fp8_tensors_is_not_the_bf16_drafter(tmp_path):
    models = models_dir(tmp_path / "models")
    (models / DRAFTER_DIR / "model.safetensors").write_bytes(
        safetensors_bytes(
            {"model.layers.0.self_attn.q_proj.weight": ("F8_E4M3", [8, 8]), "model.norm.weight": ("BF16", [8])}
        )
    )
    assert refused_with(run(models), 26) == (
        f"the drafter {models / DRAFTER_DIR} holds F8_E4M3 tensors (e.g. model.layers.0.self_attn.q_proj.weight), "
        "not the BF16 of drafter.precision bf16"
    )


def test_an_mxfp8_drafter_needs_fp8_weights_and_e8m0_scales(tmp_path):
    models = models_dir(tmp_path / "models")
    mxfp8 = replace(CHECKED, drafter=replace(CHECKED.drafter, precision="mxfp8"))
    assert refused_with(run(models, mxfp8), 26).startswith(
        f"the drafter {models / DRAFTER_DIR} has no F8_E4M3 tensor: not the MXFP8 of drafter.precision mxfp8"
    )
    (models / DRAFTER_DIR / "model.safetensors").write_bytes(
        safetensors_bytes(
            {
                "model.layers.0.self_attn.q_proj.weight": ("F8_E4M3", [8, 32]),
                "model.layers.0.self_attn.q_proj.weight_scale": ("U8", [8, 1]),
                "model.norm.weight": ("BF16", [8]),
            }
        )
    )
    assert run(models, mxfp8).passed


# --- drafter wiring ----------------------------------------------------------------------------


def _configs(tmp_path: Path, **drafter_changes):
    models = models_dir(tmp_path / "models")
    target = read_config("target", str(models / TARGET_DIR), "/models/t")
    drafter = read_config("drafter", str(models / DRAFTER_DIR), "/models/d")
    data = dict(drafter.data)
    for key, value in drafter_changes.items():
        if key == "target_layer_ids":
            data["dflash_config"] = dict(data["dflash_config"], target_layer_ids=value)
        else:
            data[key] = value
    return target, replace(drafter, data=data)


def test_the_snapshot_drafter_is_wired_to_the_snapshot_target(tmp_path):
    check_wiring(*_configs(tmp_path), CHECKED.flags)


@pytest.mark.parametrize(
    "changes,flags,message",
    [
        (
            {"target_layer_ids": [5, 14, 24, 33, 45]},
            {},
            "dflash_config.target_layer_ids: layer 45 is not one of the target's 45 layers "
            "(0-44, num_hidden_layers of ",
        ),
        (
            {"target_layer_ids": [-1]},
            {},
            "dflash_config.target_layer_ids: layer -1 is not one of the target's 45 layers",
        ),
        ({"target_hidden_size": 6144}, {}, "target_hidden_size 6144 is not the target's hidden_size 4096"),
        (
            {},
            {"num_speculative_tokens": 5},
            "--speculative-config num_speculative_tokens 5: the drafter's dflash_config.block_size 8 (",
        ),
    ],
    ids=["layer-past-the-end", "negative-layer", "hidden-size", "speculative-tokens"],
)
def test_a_drafter_wired_to_what_the_target_lacks_is_refused(tmp_path, changes, flags, message):
    served = CHECKED.flags
    if flags:
        served = replace(served, speculative_config=dict(served.speculative_config, **flags))
    with pytest.raises(CheckpointMismatch) as info:
        check_wiring(*_configs(tmp_path, **changes), served)
    assert message in str(info.value)


# --- tokenizer and chat template ---------------------------------------------------------------


def test_a_served_parser_needs_the_tokenizer(tmp_path):
    models = models_dir(tmp_path / "models")
    (models / TARGET_DIR / "tokenizer.json").unlink()
    assert refused_with(run(models), 16) == (
        f"{models / TARGET_DIR} has no tokenizer (tokenizer.json, tokenizer.model, tiktoken.model, vocab.json), "
        "which --tool-call-parser glm47 and --reasoning-parser glm45 needs"
    )


def test_a_served_parser_needs_a_chat_template(tmp_path):
    models = models_dir(tmp_path / "models")
    config = models / TARGET_DIR / "tokenizer_config.json"
    config.write_text("{}")
    assert refused_with(run(models), 16).startswith(f"{models / TARGET_DIR} has no chat template (")
    (models / TARGET_DIR / "chat_template.jinja").write_text("{{ messages }}")
    assert run(models).passed
    config.write_text("{not json")
    (models / TARGET_DIR / "chat_template.jinja").unlink()
    assert refused_with(run(models), 16).startswith(f"{config} is not JSON")


def test_no_parser_served_needs_no_tokenizer(tmp_path):
    models = models_dir(tmp_path / "models")
    (models / TARGET_DIR / "tokenizer.json").unlink()
    served = replace(CHECKED.flags, tool_call_parser=None, reasoning_parser=None)
    assert run(models, replace(CHECKED, flags=served)).passed


# --- the host command, the same code ----------------------------------------------------------------


def test_build_py_preflight_refuses_another_revision_exit_19(tmp_path):
    from recipe_copies import copy_recipe

    recipe = copy_recipe(tmp_path, lambda d: d["drafter"].__setitem__("revision", "3" * 40))
    models = cache_models_dir(tmp_path / "models")
    run_ = build_py_preflight("--recipe", str(recipe), "--models-dir", str(models), timeout=300)
    assert run_.returncode == 26, run_.stderr
    assert run_.stderr.startswith(
        f"error: pre-flight: FAIL: the drafter {models.resolve()}/{DRAFTER_DIR} is snapshot 222222222222"
    )


# --- the slow path (vLLM's serve parser on an edited argv): the same checks ---------------------------


def _host(tmp_path: Path, models: Path, *extra: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return build_py_preflight("--models-dir", str(models), "--", *extra, env=env)


@pytest.mark.oracle
def test_gpu_memory_utilization_too_small_for_one_request_is_refused_before_vllm_starts(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "echo 288000")
    run_ = _host(tmp_path, models_dir(tmp_path / "models"), "--gpu-memory-utilization", "0.02")
    assert run_.returncode == 5, run_.stdout + run_.stderr
    error = [line for line in run_.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1
    assert error[0].startswith("error: pre-flight: FAIL: re-checked (argv edited, kv_cache_memory_bytes ")
    assert "one request of max_model_len 1,048,576 tokens needs at least 114 blocks" in error[0]


@pytest.mark.oracle
def test_a_drafter_whose_target_layers_the_target_lacks_is_refused_exit_19(tmp_path):
    drafter = json.loads(
        (REPO / "recipes" / "glm53-flash-dflash2-gb300" / "configs" / "drafter.config.json").read_text()
    )
    drafter["dflash_config"]["target_layer_ids"][-1] = 45
    models = models_dir(tmp_path / "models", drafter=drafter)
    run_ = _host(tmp_path, models)
    assert run_.returncode == 26, run_.stdout + run_.stderr
    assert run_.stderr.splitlines()[-1] == (
        f"error: pre-flight: FAIL: {models.resolve()}/{DRAFTER_DIR}/config.json: dflash_config.target_layer_ids: "
        f"layer 45 is not one of the target's 45 layers (0-44, num_hidden_layers of "
        f"{models.resolve()}/{TARGET_DIR}/config.json)"
    )
