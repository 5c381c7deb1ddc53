"""What a refusal is for: vLLM's error message and the simulator's, each mapped to the reason it names (the
layer, the backend and the field it refuses, the setting TP does not divide), so that two refusals agree only
when they refuse for the same thing, never by their exception types alone (record.py's ``compare``; stdlib
only, as the record is).

Each side has its own table of the messages it writes. A message neither table reads is no reason at all
(``None``): the caller reports it as a disagreement, so a new kind of refusal needs its mapping here first.

A reason is a tuple ``(kind, *what)``; where vLLM lists more than the simulator models (every requirement a
backend fails, with notes on the kernels), ``agree`` holds the simulator's account to be part of vLLM's: the same
backends, each refused for fields vLLM names too.
"""

from __future__ import annotations

import re

# "<field> not supported": the field a backend's check refuses; vLLM's other entries are notes on its kernels
# ("FP8 KV cache requires FA3 on SM90, ..."), which the simulator does not phrase.
_FIELD = re.compile(r"^(?P<field>[\w ]+?) not supported$")
_BACKEND_REASONS = re.compile(r"(?P<backend>\w+): \[(?P<reasons>[^\]]*)\]")


def _fields(reasons: str) -> frozenset[str]:
    """The fields of a bracketed reason list (``'kv_cache_dtype not supported', ...`` or without quotes)."""
    items = (item.strip().strip("'\"") for item in reasons.split(","))
    return frozenset(m["field"] for item in items if (m := _FIELD.match(item)))


def _per_backend(reasons: str) -> dict[str, frozenset[str]]:
    return {m["backend"]: _fields(m["reasons"]) for m in _BACKEND_REASONS.finditer(reasons)}


def _unpaddable(m: re.Match) -> tuple:
    return ("page not divisible by the largest page, not paddable", m["layer"])


def _dtype_refused(m: re.Match) -> tuple:
    return ("backend does not take the KV cache dtype", m["backend"], m["dtype"])


def _selected_invalid(m: re.Match) -> tuple:
    return ("selected backend invalid", m["backend"], _fields(m["reasons"]))


def _none_valid(m: re.Match) -> tuple:
    return ("no valid backend", int(m["head_size"]), m["kv_cache_dtype"], _per_backend(m["reasons"]))


def _tp(what: str):
    return lambda m: ("not divisible by TP", what)


# Messages both sides write alike (the simulator copies vLLM's text for these).
_SHARED = (
    (
        re.compile(
            r"^NotImplementedError: Layer (?P<layer>\S+): page size is not divisible by the maximum page size "
            r"and cannot be padded\."
        ),
        _unpaddable,
    ),
    (
        re.compile(
            r"^ValueError: No valid attention backend found: (?P<backend>\w+) does not take kv_cache_dtype "
            r"'(?P<dtype>[^']+)'"
        ),
        _dtype_refused,
    ),  # fmt: skip
    (
        re.compile(
            r"^ValueError: Selected backend (?:AttentionBackendEnum\.)?(?P<backend>\w+) is not valid for this "
            r"configuration\. Reason: \[(?P<reasons>.*)\]$"
        ),
        _selected_invalid,
    ),
)

VLLM = _SHARED + (
    (
        re.compile(
            r"^ValueError: No valid attention backend found for \w+ with AttentionSelectorConfig\("
            r"head_size=(?P<head_size>\d+), .*?kv_cache_dtype=(?P<kv_cache_dtype>[\w]+), .*\)\. "
            r"Reasons: \{(?P<reasons>.*)\}\.?$"
        ),
        _none_valid,
    ),
    # The oracle's layer builders assert what vLLM's layers assert, bare; plan.py's error carries the statement.
    (re.compile(r"^AssertionError: assert hf\.num_attention_heads % tp == 0$"), _tp("num_attention_heads")),
    (re.compile(r"^AssertionError: assert heads % tp == 0$"), _tp("drafter num_attention_heads")),
    (re.compile(r"^AssertionError: assert total_kv % tp == 0$"), _tp("drafter KV heads")),
)

SIMULATOR = _SHARED + (
    (
        re.compile(
            r"^ValueError: No valid attention backend found for (?:the drafter|the target's [\w ]+ layers) "
            r"\(head_size=(?P<head_size>\d+), "
            r"kv_cache_dtype=(?P<kv_cache_dtype>[\w]+)\)\. Reasons: \{(?P<reasons>.*)\}\.?$"
        ),
        _none_valid,
    ),
    (re.compile(r"^AssertionError: num_attention_heads not divisible by TP$"), _tp("num_attention_heads")),
    (
        re.compile(r"^AssertionError: drafter num_attention_heads not divisible by TP$"),
        _tp("drafter num_attention_heads"),
    ),
    (re.compile(r"^AssertionError: drafter KV heads not divisible by TP$"), _tp("drafter KV heads")),
)


def reason(error: str, table) -> tuple | None:
    """The reason ``error`` (``"Type: message"``) names, read with ``table`` (VLLM or SIMULATOR); None when
    no entry reads it."""
    for pattern, read in table:
        if m := pattern.match(error):
            return read(m)
    return None


def agree(simulator: tuple, vllm: tuple) -> bool:
    """The two reasons name the same refusal: equal, or for a backend's fields, the simulator's a part of
    vLLM's (each backend vLLM refuses refused by the simulator too, for fields vLLM names)."""
    if simulator[0] != vllm[0]:
        return False
    kind = simulator[0]
    if kind == "selected backend invalid":
        return simulator[1] == vllm[1] and bool(simulator[2]) and simulator[2] <= vllm[2]
    if kind == "no valid backend":
        sim_backends, vllm_backends = simulator[3], vllm[3]
        return (
            simulator[1:3] == vllm[1:3]
            and sim_backends.keys() == vllm_backends.keys()
            and all(fields and fields <= vllm_backends[b] for b, fields in sim_backends.items())
        )
    return simulator == vllm


def differences(label: str, sim_error: str, vllm_error: str) -> list[str]:
    """What disagrees between two refusals of one plan (empty when they refuse for the same reason)."""
    sim, vllm = reason(sim_error, SIMULATOR), reason(vllm_error, VLLM)
    if sim is None or vllm is None:
        unread = [
            f"{side} {error!r}"
            for side, error, r in (("simulator", sim_error, sim), ("vLLM", vllm_error, vllm))
            if r is None
        ]
        return [
            f"{label}: no reason mapped for the refusal of " + " and ".join(unread) + " (geometry/oracle/refusals.py)"
        ]
    if not agree(sim, vllm):
        return [f"{label}: refused for another reason: simulator {sim} ({sim_error!r}), vLLM {vllm} ({vllm_error!r})"]
    return []
