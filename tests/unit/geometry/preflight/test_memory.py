"""The KV budget the start-time check takes as served (geometry/preflight/memory.py): the visible
GPUs through ``nvidia-smi`` (a script of the test's own first on PATH), the memory flags, the
weights per rank from the shards' headers.
"""

from __future__ import annotations

import pytest
from models_support import (
    DRAFTER_DIR,
    TARGET_DIR,
    drafter_files,
    models_dir,
)
from support.mounted_checks import CHECKED, RECIPE, fake_nvidia_smi, no_gpu, pinned, refused_with, run  # noqa: F401

from geometry.preflight.checkpoint import scan
from geometry.preflight.memory import ACTIVATION_RESERVE_BYTES, GIB, MIB, gpu_memory, kv_budget
from geometry.preflight.safetensors_header import read_header

SHARD1 = "model-00001-of-00002.safetensors"


# --- memory as served ----------------------------------------------------------------------------


def test_the_visible_gpu_sets_the_kv_budget(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "echo 288000")
    result = run(models_dir(tmp_path / "models"))
    assert result.passed, result.lines
    line = result.lines[0]
    assert (
        "with the KV budget at start: --gpu-memory-utilization 0.9 x 288,000 MiB (nvidia-smi) = 253.1 GiB, minus "
        "weights 0.0 GiB per rank (safetensors headers / TP 1) minus an activation reserve of 4.0 GiB (an "
        "estimate) = 249.1 GiB" in line
    ), line
    assert line.startswith("pre-flight: PASS: the geometry the build checked (argv as built")


@pytest.mark.parametrize(
    "mib,expected",
    [
        (
            8000,
            "with the KV budget at start (--gpu-memory-utilization 0.9 x 8,000 MiB (nvidia-smi) = 7.0 GiB, minus "
            "weights 0.0 GiB per rank (safetensors headers / TP 1) minus an activation reserve of 4.0 GiB (an "
            "estimate) = 3.0 GiB): one request of max_model_len 1,048,576 tokens needs at least 114 blocks",
        ),
        (4000, "no memory is left for the KV cache: --gpu-memory-utilization 0.9 x 4,000 MiB (nvidia-smi) = 3.5 GiB"),
    ],
    ids=["too-small-for-one-request", "nothing-left"],
)
def test_a_gpu_too_small_for_one_request_is_refused_exit_5(tmp_path, monkeypatch, mib, expected):
    fake_nvidia_smi(tmp_path, monkeypatch, f"echo {mib}")
    assert refused_with(run(models_dir(tmp_path / "models")), 5).startswith(expected)


def test_several_gpus_the_smallest_decides_and_junk_falls_back_to_the_recipe(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "echo 288000; echo 97871")
    assert gpu_memory().total_bytes == 97871 * MIB
    fake_nvidia_smi(tmp_path, monkeypatch, "echo '[N/A]'")
    assert gpu_memory().why_not == "nvidia-smi printed '[N/A]', not a memory size in MiB"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu_memory().why_not == "no nvidia-smi on PATH"


def test_kv_cache_memory_bytes_wins_and_weights_divide_by_tp():
    from geometry.preflight.memory import GpuMemory

    given = kv_budget(
        kv_cache_memory_bytes=5 * GIB,
        gpu_memory_utilization=0.9,
        tensor_parallel_size=1,
        weights_bytes=0,
        recipe_bytes=1,
        gpu=GpuMemory(100 * GIB),
    )
    assert (given.kv_cache_memory_bytes, given.source) == (5 * GIB, "--kv-cache-memory-bytes 5,368,709,120")
    tp2 = kv_budget(
        kv_cache_memory_bytes=None,
        gpu_memory_utilization=0.5,
        tensor_parallel_size=2,
        weights_bytes=20 * GIB,
        recipe_bytes=1,
        gpu=GpuMemory(100 * GIB),
    )
    assert tp2.kv_cache_memory_bytes == 50 * GIB - 10 * GIB - ACTIVATION_RESERVE_BYTES
    none = kv_budget(
        kv_cache_memory_bytes=None,
        gpu_memory_utilization=0.5,
        tensor_parallel_size=2,
        weights_bytes=20 * GIB,
        recipe_bytes=7,
        gpu=GpuMemory(None, "no nvidia-smi on PATH"),
    )
    assert (none.kv_cache_memory_bytes, none.from_recipe) == (7, True)


def test_weights_per_rank_come_from_the_headers(tmp_path):
    models = models_dir(tmp_path / "models")
    target = scan("target", str(models / TARGET_DIR))
    # 2 shards x (U8 16x8 + F8 16x1 + BF16 16) bytes
    assert target.tensor_bytes == 2 * (128 + 16 + 32)
    assert scan("drafter", str(models / DRAFTER_DIR)).tensor_bytes == sum(
        read_header(str(models / DRAFTER_DIR / n), n).tensor_bytes for n in drafter_files()
    )
