"""Bad recipes are refused with one exact line naming the file and key, before any engine is asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from recipe_copies import TEST_DIGEST, copy_recipe, pinned
from recipe_copies import delete_key as _delete
from recipe_copies import set_key as _set
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION
from stackbuild.core.errors import RecipeError
from stackbuild.core.recipe import DEFAULT_RECIPE, load_recipe

# A daemon address where nothing listens: if validation let a recipe through,
# the build would report the engine instead of the recipe.
DEAD_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def run_build(recipe_path, *extra):
    env = {**os.environ, **DEAD_DOCKER}
    return subprocess.run(
        [sys.executable, str(REPO / "build.py"), "build", "--recipe", str(recipe_path), *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def _both(*edits):
    def edit(data):
        for e in edits:
            e(data)

    return edit


BAD_RECIPES = [
    (
        "unknown-top-level-key",
        _both(pinned, _set("colour", "red")),
        "colour: unknown key (expected one of: base, description, drafter, geometry, hardware, image, name, overlay, "
        "platform, platforms, qualify, serving, speculation, target)",
    ),
    (
        "unknown-nested-key",
        _both(pinned, _set("serving.num_spec_tokens", 7)),
        "serving.num_spec_tokens: unknown key (expected one of: block_size, drafter_kv_cache_dtype, "
        "enable_prefix_caching, env, extra_args, gpu_memory_utilization, host_ip, kv_cache_dtype, max_model_len, "
        "max_num_batched_tokens, max_num_seqs, nodes, num_speculative_tokens, port, reasoning_parser, "
        "served_model_name, tensor_parallel_size, tool_call_parser)",
    ),
    (
        "string-for-integer",
        _both(pinned, _set("serving.tensor_parallel_size", "one")),
        "serving.tensor_parallel_size: expected an integer, got string 'one'",
    ),
    (
        "boolean-for-integer",
        _both(pinned, _set("serving.max_model_len", True)),
        "serving.max_model_len: expected an integer, got boolean true",
    ),
    (
        "list-item-type",
        _both(pinned, _set("serving.extra_args", ["--enforce-eager", 3])),
        "serving.extra_args[1]: expected a string, got number 3",
    ),
    ("missing-required-key", _both(pinned, _delete("target.config")), "target.config: required key is missing"),
    (
        "missing-config-file",
        _both(pinned, _set("drafter.config", "configs/nope.json")),
        "drafter.config: file not found: configs/nope.json",
    ),
    (
        "malformed-digest",
        _set("base.digest", "sha256:abc123"),
        "base.digest: not a digest: expected 'sha256:' followed by 64 lowercase hex digits, got 'sha256:abc123'",
    ),
    (
        "spec-tokens-not-block-minus-one",
        _both(pinned, _set("serving.num_speculative_tokens", 5)),
        "serving.num_speculative_tokens: must be 7 (the drafter's block size 8 minus the target's own token), got 5",
    ),
    (
        "mxfp8-drafter-on-sm10x",
        _both(pinned, _set("drafter.precision", "mxfp8")),
        "drafter.precision: the MXFP8 drafter needs the B12X kernels, which exist only for SM120/SM121; "
        "GB300 is compute capability 10.3: use bf16",
    ),
    (
        "platform-hardware-cannot-run",
        _both(pinned, _set("platform", "linux/amd64")),
        "platform: linux/amd64 cannot run on GB300 (its hosts are linux/arm64)",
    ),
    (
        "unsupported-platform",
        _both(pinned, _set("platform", "windows/arm64")),
        "platform: unsupported platform 'windows/arm64' (expected linux/arm64 or linux/amd64)",
    ),
    (
        "platform-and-platforms",
        _both(pinned, _set("platforms", ["linux/arm64"])),
        "platform: give either `platform: linux/...` or `platforms: [linux/..., ...]`",
    ),
    (
        "neither-platform-nor-platforms",
        _both(pinned, _delete("platform")),
        "platform: give either `platform: linux/...` or `platforms: [linux/..., ...]`",
    ),
    (
        "platforms-entry-hardware-cannot-run",
        _both(pinned, _delete("platform"), _set("platforms", ["linux/arm64", "linux/amd64"])),
        "platforms[1]: linux/amd64 cannot run on GB300 (its hosts are linux/arm64)",
    ),
    (
        "platforms-listed-twice",
        _both(pinned, _delete("platform"), _set("platforms", ["linux/arm64", "linux/arm64"])),
        "platforms[0]: linux/arm64 is listed twice",
    ),
    (
        "capability-family-mismatch",
        _both(pinned, _set("hardware.gpu", "Future GPU"), _set("hardware.capability_family", 120)),
        "hardware.capability_family: 120 does not match compute capability 10.3 (family 100)",
    ),
    (
        "known-gpu-family-contradicted",
        _both(pinned, _set("hardware.capability_family", 120)),
        "hardware.capability_family: GB300 has capability family 100, not 120 "
        "(leave the key out to take it from the GPU table)",
    ),
    (
        "known-gpu-capability-contradicted",
        _both(pinned, _set("hardware.compute_capability", "10.0")),
        "hardware.compute_capability: GB300 has compute capability 10.3, not '10.0' "
        "(leave the key out to take it from the GPU table)",
    ),
    (
        "known-gpu-platform-contradicted",
        _both(pinned, _set("hardware.platforms", ["linux/amd64"])),
        "hardware.platforms[0]: GB300 comes in linux/arm64 hosts, not linux/amd64",
    ),
    (
        "unknown-gpu-without-its-facts",
        _both(pinned, _set("hardware.gpu", "totallynewgpu"), _delete("hardware.compute_capability")),
        "hardware.gpu: 'totallynewgpu' is not a GPU this tool knows (H100, H200, GH200, B200, GB200, B300, GB300, "
        "RTX PRO 6000 Blackwell, RTX 5090, GB10): for another GPU give all of hardware.compute_capability, "
        "hardware.capability_family, hardware.platforms (missing: compute_capability)",
    ),
    (
        "gpu-name-without-a-letter",
        _both(pinned, _set("hardware.gpu", "--")),
        "hardware.gpu: '--' has no letter or digit to name the GPU by",
    ),
    (
        "tensor-parallel-not-power-of-two",
        _both(pinned, _set("serving.tensor_parallel_size", 3)),
        "serving.tensor_parallel_size: must be a power of two from 1 to 1024, got 3",
    ),
    ("nodes-not-positive", _both(pinned, _set("serving.nodes", 0)), "serving.nodes: must be a positive integer, got 0"),
    (
        "tensor-parallel-not-multiple-of-nodes",
        _both(pinned, _set("serving.nodes", 2)),
        "serving.nodes: serving.tensor_parallel_size 1 is not a multiple of 2 nodes "
        "(every node runs the same number of ranks)",
    ),
    (
        "unknown-kv-dtype",
        _both(pinned, _set("serving.kv_cache_dtype", "fp16")),
        "serving.kv_cache_dtype: must be one of: auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2; got 'fp16'",
    ),
    (
        "drafter-precision-choice",
        _both(pinned, _set("drafter.precision", "fp4")),
        "drafter.precision: must be one of: bf16, mxfp8; got string 'fp4'",
    ),
    (
        "secret-in-env",
        _both(pinned, _set("serving.env", {"HF_TOKEN": "hf_x"})),
        "serving.env.HF_TOKEN: looks like a secret: recipes are committed and rendered into files; "
        "pass it at run time (compose env_file) instead",
    ),
    (
        "unknown-tag-placeholder",
        _both(pinned, _set("image.tags", ["latest", "sm100-{month}"])),
        "image.tags[1]: unknown placeholder in 'sm100-{month}' (known: {date}, {family}, {gpu}, {rev})",
    ),
    (
        "unknown-overlay-series",
        _both(pinned, _set("overlay.series", "vllm-0.31.0")),
        "overlay.series: no patch series named 'vllm-0.31.0' in overlay/series/",
    ),
    (
        "base-image-with-tag",
        _both(pinned, _set("base.image", "vllm/vllm-openai:latest")),
        "base.image: give the repository only (tag and digest have their own keys), got 'vllm/vllm-openai:latest'",
    ),
    (
        "reserved-label",
        _both(pinned, _set("image.labels", {"org.opencontainers.image.version": "x"})),
        "image.labels.org.opencontainers.image.version: this label is set by the build; choose another name",
    ),
]


@pytest.mark.parametrize("name,edit,expected", BAD_RECIPES, ids=[c[0] for c in BAD_RECIPES])
def test_bad_recipe_is_refused_with_exact_line(tmp_path, name, edit, expected):
    path = copy_recipe(tmp_path, edit)
    result = run_build(path)
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"error: {path}: {expected}\n"
    assert result.stdout == ""


def test_invalid_yaml_names_the_line(tmp_path):
    path = copy_recipe(tmp_path, raw="name: x\nbase: [unclosed\n")
    result = run_build(path)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {path}: invalid YAML at line 3: ")


def test_unpinned_base_is_refused_unless_allowed(tmp_path):
    path = copy_recipe(tmp_path)  # the default recipe relies on its lock; the copy has none
    result = run_build(path)
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {path}: base.digest: vllm/vllm-openai:v{DEFAULT_VERSION} is not pinned (no digest in the recipe, "
        f"no recipe.lock.json); run `build.py lock --recipe {path}` or pass --allow-unpinned\n"
    )
    allowed = run_build(path, "--allow-unpinned", "--dry-run")
    assert allowed.returncode == 0, allowed.stderr
    assert f"FROM vllm/vllm-openai:v{DEFAULT_VERSION}\n" in allowed.stdout


def test_stale_lock_is_refused(tmp_path):
    path = copy_recipe(tmp_path)
    lock = path.parent / "recipe.lock.json"
    lock.write_text(
        json.dumps(
            {"base": {"image": "vllm/vllm-openai", "tag": "v0.32.0", "platform": "linux/arm64", "digest": TEST_DIGEST}}
        )
    )
    result = run_build(path, "--dry-run")
    assert result.returncode == 2
    assert result.stderr == (
        f"error: {lock}: base: the lock pins vllm/vllm-openai:v0.32.0 for linux/arm64, the recipe asks for "
        f"vllm/vllm-openai:v{DEFAULT_VERSION} for linux/arm64; run `build.py lock --recipe {path.resolve()}`\n"
    )


def test_lock_and_recipe_digest_must_agree(tmp_path):
    other = "sha256:" + "cd" * 32
    path = copy_recipe(tmp_path, _set("base.digest", other))
    (path.parent / "recipe.lock.json").write_text(
        json.dumps(
            {
                "base": {
                    "image": "vllm/vllm-openai",
                    "tag": f"v{DEFAULT_VERSION}",
                    "platform": "linux/arm64",
                    "digest": TEST_DIGEST,
                }
            }
        )
    )
    result = run_build(path, "--dry-run")
    assert result.returncode == 2
    assert f"base.digest: {other} differs from the lock's {TEST_DIGEST}" in result.stderr


def test_default_recipe_loads_with_its_configs():
    recipe = load_recipe(DEFAULT_RECIPE)
    assert recipe.drafter_block_size - 1 == recipe.serving.num_speculative_tokens
    assert recipe.platform in recipe.hardware.platforms
    assert recipe.target_config and recipe.drafter_config


def test_recipe_error_type_carries_file_and_key(tmp_path):
    path = copy_recipe(tmp_path, _both(pinned, _set("serving.port", 70000)))
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert (info.value.path, info.value.key) == (str(path), "serving.port")


def test_known_gpu_by_name_alone_takes_the_table(tmp_path):
    """`hardware: {gpu: gb300}`: compute capability 10.3 (vLLM's family 100, major x 10) and arm64
    hosts, as NVIDIA's GB300 is (Grace, Blackwell Ultra); the tag field is the name in lowercase."""

    def edit(data):
        pinned(data)
        data["hardware"] = {"gpu": "gb300"}

    recipe = load_recipe(copy_recipe(tmp_path, edit))
    assert (recipe.hardware.compute_capability, recipe.hardware.capability_family) == ("10.3", 100)
    assert recipe.hardware.platforms == ("linux/arm64",)
    assert recipe.hardware.gpu_tag == "gb300"


def test_gpu_name_with_spaces_is_a_tag_field(tmp_path):
    """An RTX PRO 6000 Blackwell (SM120, x86-64 hosts): the {gpu} field is `rtx-pro-6000-blackwell`,
    never an invalid image.tags entry."""

    def edit(data):
        pinned(data)
        data["platform"] = "linux/amd64"
        data["hardware"] = {"gpu": "RTX PRO 6000 Blackwell"}
        data["drafter"]["precision"] = "bf16"

    recipe = load_recipe(copy_recipe(tmp_path, edit))
    assert recipe.hardware.capability_family == 120
    assert recipe.hardware.gpu_tag == "rtx-pro-6000-blackwell"
    result = run_build(recipe.path, "--dry-run")
    assert "sm120-rtx-pro-6000-blackwell-" in result.stdout
    # the plan is shown whatever the gate says on SM120; the dry run then exits with the gate's code, as the build
    geometry = subprocess.run(
        [sys.executable, str(REPO / "build.py"), "geometry", "--recipe", str(recipe.path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == geometry.returncode, result.stderr
