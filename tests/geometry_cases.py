"""Deterministic generated scenarios for the KV-geometry simulator tests.

The matrix spans TP 1/2/4/8, num_speculative_tokens 0..15, fp8/bf16/auto
target and drafter KV dtypes, drafter KV heads, head size and layer count,
GPU families 90/100/120, default and user block sizes, GLM-5.3-style targets
(index_kpool 4 and 16, other KDA widths and layer counts), Kimi Linear
(KDA + dense NoPE MLA, other KDA widths, conv kernels, layer patterns and MLA
latent widths) and a Qwen3-Next style GDN + full-attention hybrid, each with
and without a drafter (50% GLM, 30% Kimi Linear, 20% Qwen3-Next).  The full
product is far too big for the oracle, so ``sample(n, seed)`` draws a seeded,
reproducible subset from the configs' and flags' values alone: no simulator runs to choose, keep
or change a draw (a drafter's ``attention_backend`` is drawn as well: unset, "auto" or the
recipes' FLASH_ATTN). Each draw is compared as drawn, planned or refused by either side.
No expected numbers live here: the oracle is vLLM.
"""

from __future__ import annotations

import copy
import importlib.metadata
import json
import random

from support.repo import REPO

CONFIGS = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "configs"
GIB = 1 << 30


def _oracle_version() -> str:
    """The release of the importable vLLM (the oracle), read from its metadata without importing it:
    the venv's, or a pristine tree put first on PYTHONPATH; the default release where none is."""
    try:
        return importlib.metadata.version("vllm").split("+", 1)[0]
    except importlib.metadata.PackageNotFoundError:
        from geometry.vllm_versions import DEFAULT_VERSION

        return DEFAULT_VERSION


# Every case is an input for the oracle's release; the CPU platform's cases only where that release
# models it (cpu_planned).
ORACLE_VERSION = _oracle_version()


def cpu_planned() -> bool:
    """Whether the oracle's release models vLLM's CPU platform (VllmRelease.cpu_refusal; read when a matrix
    asks, so drawing the sample imports nothing of the product)."""
    from geometry.vllm_versions import release

    return release(ORACLE_VERSION).cpu_refusal is None


def recipe_configs() -> tuple[dict, dict]:
    t = json.loads((CONFIGS / "target.config.json").read_text())
    d = json.loads((CONFIGS / "drafter.config.json").read_text())
    return t, d


def glm_target(rng: random.Random) -> dict:
    t, _ = recipe_configs()
    t = copy.deepcopy(t)
    t["index_kpool"] = rng.choice([4, 4, 16, 8])
    t["linear_num_heads"] = rng.choice([64, 64, 32, 16])
    t["linear_head_dim"] = rng.choice([128, 128, 64])
    n = rng.choice([45, 45, 12, 8, 20])
    t["num_hidden_layers"] = n
    t["layer_types"] = ["linear_attention" if i % 4 != 3 else "indexed_attention" for i in range(n)]
    t["mlp_layer_types"] = ["dense"] * min(3, n) + ["sparse"] * max(0, n - 3)
    t["kv_lora_rank"] = rng.choice([512, 512, 256])
    t["max_position_embeddings"] = rng.choice([1048576, 131072])
    return t


def qwen3_next_target(rng: random.Random) -> dict:
    n = rng.choice([48, 12, 24])
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "dtype": "bfloat16",
        "hidden_size": 2048,
        "num_hidden_layers": n,
        "num_attention_heads": 16,
        "num_key_value_heads": rng.choice([2, 4, 8]),
        "head_dim": 128,  # FA4 head-256 pages depend on the flash-attn build
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "full_attention_interval": 4,
        "max_position_embeddings": 262144,
        "vocab_size": 151936,
        "intermediate_size": 5120,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
    }


def kimi_linear_config(n: int = 27, full_every: int = 4) -> dict:
    """A Kimi-Linear-48B-A3B-shaped ``KimiLinearConfig`` (as reported for
    moonshotai/Kimi-Linear-48B-A3B-Instruct; not downloaded): 1-based
    ``kda_layers`` / ``full_attn_layers``, every 4th layer and the last one MLA."""
    full = [i for i in range(1, n + 1) if i % full_every == 0 or i == n]
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "dtype": "bfloat16",
        "vocab_size": 163840,
        "hidden_size": 2304,
        "head_dim": 72,
        "intermediate_size": 9216,
        "num_hidden_layers": n,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "q_lora_rank": None,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "mla_use_nope": True,
        "num_experts": 256,
        "num_experts_per_token": 8,
        "num_shared_experts": 1,
        "moe_intermediate_size": 1024,
        "first_k_dense_replace": 1,
        "max_position_embeddings": 1048576,
        "linear_attn_config": {
            "kda_layers": [i for i in range(1, n + 1) if i not in full],
            "full_attn_layers": full,
            "num_heads": 32,
            "head_dim": 128,
            "short_conv_kernel_size": 4,
        },
    }


def kimi_linear_target(rng: random.Random) -> dict:
    t = kimi_linear_config(rng.choice([27, 27, 12, 8]), rng.choice([4, 4, 3, 6]))
    lac = t["linear_attn_config"]
    lac["num_heads"] = rng.choice([32, 32, 16, 64])
    lac["head_dim"] = rng.choice([128, 128, 64])
    lac["short_conv_kernel_size"] = rng.choice([4, 4, 2])
    t["kv_lora_rank"] = rng.choice([512, 512, 256])  # MLA head 576 or 320
    t["max_position_embeddings"] = rng.choice([1048576, 131072])
    return t


def drafter(rng: random.Random) -> dict:
    _, d = recipe_configs()
    d = copy.deepcopy(d)
    d["num_key_value_heads"] = rng.choice([1, 2, 4, 8, 8, 16])
    d["num_attention_heads"] = 32
    d["head_dim"] = rng.choice([64, 128, 128, 96])
    n = rng.choice([1, 2, 5, 5, 8])
    d["num_hidden_layers"] = n
    if rng.random() < 0.8:
        d["layer_types"] = ["sliding_attention"] * n
    else:
        d["layer_types"] = ["full_attention"] * n
    d["dflash_config"] = dict(d["dflash_config"], target_layer_ids=list(range(n)))
    return d


def scenario(rng: random.Random) -> dict:
    r = rng.random()
    kind = "glm" if r < 0.5 else ("kimi_linear" if r < 0.8 else "qwen3_next")
    target = {"glm": glm_target, "kimi_linear": kimi_linear_target, "qwen3_next": qwen3_next_target}[kind](rng)
    has_drafter = rng.random() < 0.75
    family = rng.choice([100, 100, 100, 120, 90])
    tp = rng.choice([1, 2, 4, 8])
    if kind == "qwen3_next":
        kv_heads = target["num_key_value_heads"]
        if tp > kv_heads and tp % kv_heads:
            tp = kv_heads
    return {
        "target_config": target,
        "drafter_config": drafter(rng) if has_drafter else None,
        "tensor_parallel_size": tp,
        "kv_cache_dtype": rng.choice(["auto", "auto", "fp8", "bfloat16"]),
        "drafter_kv_cache_dtype": (rng.choice([None, None, "fp8", "bfloat16", "auto"]) if has_drafter else None),
        "num_speculative_tokens": rng.randint(0, 15) if (has_drafter or rng.random() < 0.3) else 0,
        "capability_family": family,
        "block_size": rng.choice([None] * 6 + [16, 64, 128, 256, 1024]),
        "kv_cache_memory_bytes": rng.choice([8, 40, 200]) * GIB + rng.randint(0, GIB),
        "vllm_behaviour": "stock",
        "vllm_version": ORACLE_VERSION,
        **prefix_caching(kind != "qwen3_next" and rng.random() < 0.5),
    }


def prefix_caching(on: bool) -> dict:
    """The gate-input pair vLLM runs: prefix caching on means "align"."""
    return {"enable_prefix_caching": on, "mamba_cache_mode": "align" if on else "none"}


def align_matrix(behaviour: str) -> list[dict]:
    """The default recipe's shape with prefix caching on ("align"): TP 1/2/4 x
    num_speculative_tokens 0/1/3/7 x index_kpool 4/16 x (no drafter, or the
    drafter with fp8/bf16 KV and 4/8 KV heads)."""
    target, drafter = recipe_configs()
    cases = []
    for tp in (1, 2, 4):
        for num_spec in (0, 1, 3, 7):
            for kpool in (4, 16):
                t = dict(target, index_kpool=kpool)
                variants = [None] + [(dtype, heads) for dtype in ("fp8", "bfloat16") for heads in (4, 8)]
                for variant in variants:
                    d = None if variant is None else dict(drafter, num_key_value_heads=variant[1])
                    cases.append(
                        recipe_input(
                            behaviour,
                            target_config=t,
                            drafter_config=d,
                            tensor_parallel_size=tp,
                            num_speculative_tokens=num_spec,
                            drafter_kv_cache_dtype=None if variant is None else variant[0],
                            **prefix_caching(True),
                        )
                    )
    return cases


def gb10_matrix(behaviour: str) -> list[dict]:
    """The default recipe's configs on GB10 (capability 12.1, family 120):
    TP 2/4 x target KV auto/fp8 x prefix caching on/off ("align"/"none") x
    (no drafter, or the drafter with KV auto, bfloat16, fp8 or none of its
    own: it then inherits the target's rewritten fp8_ds_mla)."""
    target, drafter = recipe_configs()
    cases = []
    for tp in (2, 4):
        for kv in ("auto", "fp8"):
            for prefix in (True, False):
                for d_kv in ("none", None, "auto", "bfloat16", "fp8"):
                    cases.append(
                        recipe_input(
                            behaviour,
                            capability_family=120,
                            tensor_parallel_size=tp,
                            kv_cache_dtype=kv,
                            drafter_config=None if d_kv == "none" else drafter,
                            drafter_kv_cache_dtype=None if d_kv == "none" else d_kv,
                            num_speculative_tokens=0 if d_kv == "none" else 7,
                            **prefix_caching(prefix),
                        )
                    )
    return cases


def qwen3_dense_target(layers: int = 4, kv_heads: int = 2, head_dim: int = 64) -> dict:
    """A dense Qwen3 (every layer full attention), the shape of tests/tiny_model.py's."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "torch_dtype": "bfloat16",
        "hidden_size": 256,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": 4096,
    }


DENSE_FAMILIES = (0, 90, 100, 120)  # 0: no GPU (vLLM's CPU platform), where the release models it


def dense_matrix(behaviour: str) -> list[dict]:
    """A dense Qwen3 target without a drafter: family (CPU, 90, 100, 120) x TP 1/2 x KV heads
    1/2/8 x head size 64/128 x default and user block sizes x prefix caching on/off, speculation
    (ngram: num_speculative_tokens 3, no drafter layers) and target KV auto or (GPU) fp8."""
    cases = []
    for family in DENSE_FAMILIES[0 if cpu_planned() else 1 :]:
        for tp, kv_heads, head_dim in ((1, 2, 64), (2, 2, 128), (2, 1, 64), (1, 8, 128)):
            for block in (None, 32, 256):
                for prefix in (True, False):
                    kv = "fp8" if family and block == 256 else "auto"
                    cases.append(
                        {
                            "target_config": qwen3_dense_target(kv_heads=kv_heads, head_dim=head_dim),
                            "drafter_config": None,
                            "tensor_parallel_size": tp,
                            "kv_cache_dtype": kv,
                            "drafter_kv_cache_dtype": None,
                            "num_speculative_tokens": 3 if prefix else 0,
                            "capability_family": family,
                            "block_size": block,
                            "max_model_len": 1024,
                            "enable_prefix_caching": prefix,
                            "mamba_cache_mode": "none",
                            "kv_cache_memory_bytes": GIB + 12345,
                            "vllm_behaviour": behaviour,
                            "vllm_version": ORACLE_VERSION,
                        }
                    )
    return cases


def qwen3_moe_target(layers: int = 4, kv_heads: int = 4, head_dim: int = 128) -> dict:
    """A Qwen3-MoE (Qwen3-30B-A3B's keys at a small size): every layer full attention, as a dense
    Qwen3's; the MoE keys (experts, sparse step, an MLP-only first layer) change no KV cache."""
    return dict(
        qwen3_dense_target(layers, kv_heads, head_dim),
        architectures=["Qwen3MoeForCausalLM"],
        model_type="qwen3_moe",
        intermediate_size=512,
        moe_intermediate_size=128,
        num_experts=8,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        mlp_only_layers=[0],
        norm_topk_prob=True,
    )


def qwen3_moe_matrix(behaviour: str) -> list[dict]:
    """Qwen3-MoE targets: family 100 x TP 1/2 x (no drafter, or the default recipe's DFlash drafter with
    num_speculative_tokens 7) x prefix caching on/off, and vLLM's CPU platform (family 0, no drafter)
    x TP 1/2. TP 2 splits 4 KV heads or replicates 1."""
    _, drafter = recipe_configs()
    cases = []
    for family, drafters in ((100, (None, drafter)), (0, (None,)))[: 2 if cpu_planned() else 1]:
        for tp, kv_heads in ((1, 4), (2, 4), (2, 1)):
            for d in drafters:
                for prefix in (False, True):
                    cases.append(
                        {
                            "target_config": qwen3_moe_target(kv_heads=kv_heads),
                            "drafter_config": d,
                            "tensor_parallel_size": tp,
                            "kv_cache_dtype": "auto",
                            "drafter_kv_cache_dtype": None,
                            "num_speculative_tokens": 0 if d is None else 7,
                            "capability_family": family,
                            "block_size": None,
                            "max_model_len": 1024,
                            "enable_prefix_caching": prefix,
                            "mamba_cache_mode": "none",
                            "kv_cache_memory_bytes": GIB + 12345,
                            "vllm_behaviour": behaviour,
                            "vllm_version": ORACLE_VERSION,
                            "drafter_attention_backend": None if d is None else "FLASH_ATTN",
                        }
                    )
    return cases


# The drafter's --speculative-config attention_backend a draw runs: unset (vLLM's automatic choice), "auto"
# (the same, said), or the pin the recipes set; drawn from its own seeded stream.
DRAFTER_ATTENTION_BACKENDS = (None, "auto", "FLASH_ATTN", "FLASH_ATTN", "FLASH_ATTN")


def sample(n: int, seed: int = 20261130) -> list[dict]:
    """``n`` seeded draws of ``scenario``, each drafter's ``attention_backend`` drawn from a second stream."""
    rng, backends = random.Random(seed), random.Random(f"{seed}-drafter-attention-backend")
    cases = []
    for _ in range(n):
        data = scenario(rng)
        backend = backends.choice(DRAFTER_ATTENTION_BACKENDS)
        if data["drafter_config"] is not None and backend is not None:
            data["drafter_attention_backend"] = backend
        cases.append(data)
    return cases


def draws(cases: list[dict], behaviour: str, vllm_version: str) -> dict[str, dict]:
    """``cases`` keyed by draw id ``s{i}``, each with ``behaviour`` and ``vllm_version``: every draw, as drawn."""
    width = len(str(max(len(cases) - 1, 0)))
    return {
        f"s{i:0{width}d}": dict(data, vllm_behaviour=behaviour, vllm_version=vllm_version)
        for i, data in enumerate(cases)
    }


def recipe_input(behaviour: str, memory: int = 200 * GIB, **changes) -> dict:
    t, d = recipe_configs()
    data = {
        "target_config": t,
        "drafter_config": d,
        "tensor_parallel_size": 1,
        "kv_cache_dtype": "auto",
        "drafter_kv_cache_dtype": None,
        "num_speculative_tokens": 7,
        "capability_family": 100,
        "kv_cache_memory_bytes": memory,
        "vllm_behaviour": behaviour,
        "vllm_version": ORACLE_VERSION,
        "drafter_attention_backend": "FLASH_ATTN",
    }
    data.update(changes)
    return data


def post_scenario(behaviour: str) -> dict:
    """The post's build-time check: drafter with 4 KV heads in fp8, num_spec 0."""
    t, d = recipe_configs()
    d = dict(d, num_key_value_heads=4)
    return recipe_input(
        behaviour, drafter_config=d, kv_cache_dtype="fp8", drafter_kv_cache_dtype="fp8", num_speculative_tokens=0
    )
