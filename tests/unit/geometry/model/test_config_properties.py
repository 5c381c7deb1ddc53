"""Property: a well-typed but odd model config or gate input is refused with the project's error or judged.

In process and fast: Hypothesis builds configs for every modelled architecture (GLM-5.3 from the
recipe's snapshot, Qwen3-Next and Kimi Linear from tests/geometry_cases.py) with structured
changes (layer patterns permuted, all one type, other lengths; tiny, odd and huge counts; heads
that do not divide; windows, block sizes, kpool/topk; overlapping or out-of-order layer lists)
and odd gate inputs (TP, speculative tokens, lengths, memory, block size, prefix caching, GPU
family, KV dtypes). Each goes where the CLI and the in-image gate send it
(GeometryInputs.from_json, which checks both configs as it reads them -> geometry.verdict.gate_run.run_gate: simulate,
gate.judge; the table and the report JSON) and through the pre-flight's in-process steps
(check_target/check_drafter, derive_inputs, run_gate without the vLLM cross-check). Allowed: a BadInput (ConfigInvalid
included) from the checks or the simulator, or a verdict; any other exception is a bug.

More examples: CONFIG_PROPERTY_EXAMPLES=5000 .venv/bin/python -m pytest -q tests/test_config_properties.py
"""

from __future__ import annotations

import copy
import json
import os
import random

from geometry_cases import kimi_linear_config, qwen3_next_target, recipe_configs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from geometry.errors import BadInput
from geometry.model import config as model_config
from geometry.model.architectures import BY_KIND
from geometry.model.inputs import GeometryInputs
from geometry.model.serve_settings import ServeDefaults
from geometry.preflight.check import Unchecked, derive_inputs
from geometry.preflight.configs import MountedConfig
from geometry.preflight.serve_flags import ServeFlags
from geometry.verdict import table
from geometry.verdict.gate_run import run_gate
from geometry.vllm_versions import DEFAULT_VERSION

EXAMPLES = int(os.environ.get("CONFIG_PROPERTY_EXAMPLES", "200"))
GLM, DRAFTER = recipe_configs()
QWEN = qwen3_next_target(random.Random(0))
KIMI = kimi_linear_config()

# Counts a config may carry: tiny, odd, powers of two, not dividing, and near the checker's bound.
counts = st.one_of(
    st.sampled_from(
        [
            1,
            2,
            3,
            5,
            7,
            8,
            12,
            16,
            24,
            31,
            32,
            48,
            64,
            96,
            100,
            127,
            128,
            256,
            257,
            512,
            576,
            1000,
            4096,
            model_config.MAX_COUNT,
        ]
    ),
    st.integers(min_value=1, max_value=300),
)
small_counts = st.one_of(st.sampled_from([1, 2, 3, 4, 5, 8, 16]), st.integers(min_value=1, max_value=40))
tokens = st.one_of(
    st.sampled_from([0, 1, 2, 3, 16, 127, 2048, 1 << 20, model_config.MAX_TOKENS]),
    st.integers(min_value=0, max_value=1 << 24),
)


def _layer_pattern(kinds: tuple[str, str]):
    """(length, how) -> a layer_types list: all one kind, alternating, random, every k-th, shuffled."""
    linear, attention = kinds
    return st.one_of(
        st.builds(lambda n, k: [k] * n, small_counts, st.sampled_from(kinds)),
        st.lists(st.sampled_from(kinds), min_size=1, max_size=40),
        st.builds(
            lambda n, k: [attention if (i + 1) % k == 0 else linear for i in range(n)],
            small_counts,
            st.integers(min_value=1, max_value=8),
        ),
    )


def _perturb(draw, config: dict, key: str, values) -> None:
    """One time in four: the key deleted (one time in six of those) or given a value drawn from ``values``."""
    if draw(st.integers(0, 3)) == 0:
        if draw(st.integers(0, 5)) == 0:
            config.pop(key, None)
        else:
            config[key] = draw(values)


@st.composite
def glm_target(draw):
    t = copy.deepcopy(GLM)
    if draw(st.booleans()):
        types = draw(_layer_pattern(BY_KIND["glm5next"].layer_types))
        t["layer_types"] = types
        t["num_hidden_layers"] = len(types) if draw(st.integers(0, 9)) else draw(small_counts)
    elif draw(st.booleans()):
        t.pop("layer_types")
        t["num_hidden_layers"] = draw(small_counts)
    for key, values in (
        ("num_attention_heads", counts),
        ("kv_lora_rank", counts),
        ("qk_rope_head_dim", st.one_of(st.just(0), counts, st.none())),
        ("linear_num_heads", counts),
        ("linear_head_dim", counts),
        ("linear_conv_kernel_dim", small_counts),
        ("index_topk", st.one_of(st.none(), counts)),
        ("index_kpool", st.one_of(st.sampled_from([1, 2, 3, 4, 5, 16, 64, 1000]), counts)),
        ("index_head_dim", st.one_of(st.sampled_from([1, 64, 100, 127, 128, 129, 256]), counts)),
        ("max_position_embeddings", st.one_of(st.none(), tokens)),
    ):
        _perturb(draw, t, key, values)
    return t


@st.composite
def qwen_target(draw):
    t = copy.deepcopy(QWEN)
    if draw(st.booleans()):
        types = draw(_layer_pattern(BY_KIND["qwen3_next"].layer_types))
        t["layer_types"] = types
        t["num_hidden_layers"] = len(types) if draw(st.integers(0, 9)) else draw(small_counts)
    else:
        t["num_hidden_layers"] = draw(small_counts)
        if draw(st.booleans()):
            t["full_attention_interval"] = draw(small_counts)
    for key, values in (
        ("num_attention_heads", counts),
        ("num_key_value_heads", counts),
        ("head_dim", st.one_of(st.none(), counts)),
        ("hidden_size", counts),
        ("linear_num_key_heads", counts),
        ("linear_num_value_heads", counts),
        ("linear_key_head_dim", counts),
        ("linear_value_head_dim", counts),
        ("linear_conv_kernel_dim", small_counts),
        ("max_position_embeddings", st.one_of(st.none(), tokens)),
    ):
        _perturb(draw, t, key, values)
    return t


@st.composite
def kimi_target(draw):
    n = draw(small_counts)
    t = kimi_linear_config(n, draw(st.integers(min_value=1, max_value=8)))
    lac = t["linear_attn_config"]
    layers = st.integers(min_value=1, max_value=n)
    how = draw(st.sampled_from(["as-is", "lists", "overlap", "shuffled", "duplicated", "one-kind"]))
    if how == "lists":
        lac["kda_layers"] = draw(st.lists(layers, max_size=n))
        lac["full_attn_layers"] = draw(st.lists(layers, max_size=n))
    elif how == "overlap":
        lac["full_attn_layers"] = sorted(set(lac["full_attn_layers"]) | set(draw(st.lists(layers, max_size=3))))
    elif how == "shuffled":
        lac["kda_layers"] = draw(st.permutations(lac["kda_layers"]))
        lac["full_attn_layers"] = draw(st.permutations(lac["full_attn_layers"]))
    elif how == "duplicated":
        lac["full_attn_layers"] = lac["full_attn_layers"] * 2
        lac["kda_layers"] = lac["kda_layers"] + lac["kda_layers"][:1]
    elif how == "one-kind":
        lac["kda_layers"], lac["full_attn_layers"] = draw(
            st.sampled_from([(list(range(1, n + 1)), [n]), ([], list(range(1, n + 1))), (list(range(1, n + 1)), [])])
        )
    for key, values in (
        ("kv_lora_rank", counts),
        ("qk_nope_head_dim", counts),
        ("v_head_dim", counts),
        ("qk_rope_head_dim", st.one_of(st.just(0), counts)),
        ("mla_use_nope", st.booleans()),
        ("max_position_embeddings", st.one_of(st.none(), tokens)),
    ):
        if draw(st.integers(0, 3)) == 0:
            t[key] = draw(values)
    for key, values in (("num_heads", counts), ("head_dim", counts), ("short_conv_kernel_size", small_counts)):
        if draw(st.integers(0, 3)) == 0:
            lac[key] = draw(values)
    return t


@st.composite
def drafter(draw):
    d = copy.deepcopy(DRAFTER)
    n = draw(small_counts)
    d["num_hidden_layers"] = n
    kind = draw(st.sampled_from(["sliding", "full", "mixed", "none"]))
    if kind == "none":
        d.pop("layer_types")
    else:
        d["layer_types"] = (
            ["sliding_attention"] * n
            if kind == "sliding"
            else ["full_attention"] * n
            if kind == "full"
            else draw(st.lists(st.sampled_from(model_config.DRAFTER_LAYER_TYPES), min_size=n, max_size=n))
        )
    for key, values in (
        ("num_attention_heads", counts),
        ("num_key_value_heads", st.one_of(st.none(), counts)),
        ("head_dim", st.one_of(st.none(), counts)),
        ("hidden_size", counts),
        ("sliding_window", st.one_of(st.none(), st.sampled_from([1, 2, 16, 2048]), tokens)),
    ):
        _perturb(draw, d, key, values)
    dflash = d["dflash_config"]
    if draw(st.integers(0, 3)) == 0:
        dflash["block_size"] = draw(st.sampled_from([2, 3, 4, 7, 8, 16, 64, 1000]))
    if draw(st.integers(0, 4)) == 0:
        dflash["use_swa"] = draw(st.booleans())
    if draw(st.integers(0, 4)) == 0:
        dflash["swa_window_size"] = draw(st.one_of(st.none(), st.sampled_from([1, 16, 4096]), tokens))
    return d


@st.composite
def target(draw):
    """A target config, sometimes in another model dtype, nested as a multimodal config's text_config
    or known by its model_type alone."""
    t = draw(st.one_of(glm_target(), qwen_target(), kimi_target()))
    if draw(st.integers(0, 4)) == 0:
        t["dtype"] = draw(st.sampled_from(["float16", "float32", "torch.bfloat16", "float8_e4m3fn", None]))
    how = draw(st.sampled_from(["flat"] * 6 + ["nested", "model-type-only"]))
    if how == "nested":
        t = {"architectures": t["architectures"], "model_type": t["model_type"], "text_config": t}
    elif how == "model-type-only":
        t.pop("architectures")
    return t


dtypes = st.sampled_from(["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16", "fp8_ds_mla"])
gate_inputs = st.fixed_dictionaries(
    {
        "target_config": target(),
        "drafter_config": st.one_of(st.none(), drafter()),
        "tensor_parallel_size": st.sampled_from([1, 1, 2, 3, 4, 6, 8, 16, 64, 1024]),
        "kv_cache_dtype": dtypes,
        "drafter_kv_cache_dtype": st.one_of(st.none(), dtypes),
        "num_speculative_tokens": st.one_of(st.sampled_from([0, 1, 7, 15, 16, 100]), st.integers(0, 4096)),
        "capability_family": st.sampled_from([80, 89, 90, 100, 103, 110, 120, 121]),
        "enable_prefix_caching": st.booleans(),
        "block_size": st.one_of(st.none(), st.sampled_from([-16, 0, 1, 2, 3, 16, 64, 128, 256, 1000, 1024, 1 << 20])),
        "max_model_len": st.one_of(
            st.none(), st.sampled_from([-1, 0, 1, 2, 16, 4096, 1 << 20, 1 << 30]), st.integers(1, 1 << 22)
        ),
        "kv_cache_memory_bytes": st.one_of(
            st.sampled_from([0, 1, 4096, 1 << 30, 200 << 30, 1 << 60]), st.integers(0, 1 << 45)
        ),
        "drafter_attention_backend": st.sampled_from([None, "auto", "FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]),
        "vllm_behaviour": st.sampled_from(["stock", "overlay"]),
    }
).flatmap(
    lambda raw: st.sampled_from([n for n in (1, 1, 2, 3, 4, 8) if raw["tensor_parallel_size"] % n == 0]).map(
        lambda nodes: dict(raw, nodes=nodes)
    )
)


def _gate(raw: dict) -> None:
    """What the in-image gate runs (geometry/gate_main.py), the table and report JSON included."""
    run = run_gate(GeometryInputs.from_json(raw))
    table.render_text(run.report, run.verdict)
    json.dumps(table.to_json(run.report, run.verdict), sort_keys=True, default=str)


def _preflight(raw: dict) -> None:
    """The pre-flight's in-process steps (geometry/preflight/check.py) up to its vLLM cross-check."""
    model_config.check_target(raw["target_config"])
    if raw["drafter_config"] is not None:
        model_config.check_drafter(raw["drafter_config"])
    spec = None
    if raw["drafter_config"] is not None:
        spec = {
            "method": "dflash",
            "model": "/drafter",
            "num_speculative_tokens": raw["num_speculative_tokens"],
            "kv_cache_dtype": raw["drafter_kv_cache_dtype"],
            "attention_backend": raw["drafter_attention_backend"],
        }
    flags = ServeFlags(
        model="/target",
        tensor_parallel_size=raw["tensor_parallel_size"],
        kv_cache_dtype=raw["kv_cache_dtype"],
        block_size=raw["block_size"],
        max_model_len=raw["max_model_len"],
        enable_prefix_caching=raw["enable_prefix_caching"],
        mamba_cache_mode=None,
        kv_cache_memory_bytes=None,
        speculative_config=spec,
        gpu_memory_utilization=0.9,
    )

    def mounted(role, data):
        return None if data is None else MountedConfig(role, f"/{role}/config.json", "0" * 64, data)

    built = ServeDefaults(
        nodes=raw["nodes"],
        capability_family=raw["capability_family"],
        cpu_avx512_bf16=raw.get("cpu_avx512_bf16", False),
        kv_cache_memory_bytes=raw["kv_cache_memory_bytes"],
        vllm_behaviour=raw["vllm_behaviour"],
        max_num_batched_tokens=raw.get("max_num_batched_tokens"),
        vllm_version=raw.get("vllm_version", DEFAULT_VERSION),
    )
    inputs = derive_inputs(
        flags, mounted("target", raw["target_config"]), mounted("drafter", raw["drafter_config"]), built
    )
    run_gate(inputs)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(gate_inputs)
def test_odd_configs_and_gate_inputs_are_refused_or_judged(raw):
    raw = dict(raw, mamba_cache_mode="align" if raw["enable_prefix_caching"] else "none")
    try:
        _gate(raw)
    except BadInput:
        pass
    try:
        _preflight(raw)
    except (BadInput, Unchecked):
        pass
