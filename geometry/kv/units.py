"""The byte sizes of the KV cache dtypes, the dtypes modelled, and the block arithmetic vLLM's
planning uses (stdlib only)."""

from __future__ import annotations

DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "uint8": 1,
}
# The KV cache dtypes modelled (``--kv-cache-dtype`` and the speculative config's): the recipe takes these.
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(x: int, m: int) -> int:
    return cdiv(x, m) * m


def next_power_of_2(n: int) -> int:
    return 1 if n < 1 else 1 << (n - 1).bit_length()
