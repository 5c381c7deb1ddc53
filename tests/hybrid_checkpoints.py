"""The checkpoints of the CPU hybrid DFlash test recipe (tests/recipes/cpu-hybrid-dflash), written by
the `safetensors` library: random weights of the shapes vLLM loads, so vLLM serves them with its
default load format and the start check reads real shards.

The target: transformers' own Qwen3NextForCausalLM built from the recipe's config (random init)
and saved with ``save_pretrained`` (sharded, with model.safetensors.index.json). The drafter: a
DFlash drafter has no class in transformers, so its tensors are listed here by the names and shapes
vLLM's DFlashQwen3ForCausalLM loads (vllm/model_executor/models/qwen3_dflash.py: the Qwen3 decoder
layers, ``fc`` over the target layers' hidden states, ``hidden_norm``, ``norm``, ``lm_head``; the
embedding is the target's) and written with ``safetensors.torch.save_file``. Both directories get
the tiny tokenizer of tests/tiny_model.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cpu_hybrid_cases import config as recipe_config
from tiny_model import write_tiny_model

SEED = 20261202


def write_target(out: Path, max_shard_size: str = "4MB") -> Path:
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    write_tiny_model(out)
    config = recipe_config("target")
    torch.manual_seed(SEED)
    model = Qwen3NextForCausalLM(Qwen3NextConfig(**config)).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True, max_shard_size=max_shard_size)
    # The recipe's config as it is (save_pretrained writes transformers' own rendering of it).
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def drafter_tensors(config: dict, target: dict) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor vLLM's DFlash drafter loads from its checkpoint."""
    hidden, head_dim = config["hidden_size"], config["head_dim"]
    heads, kv_heads, inner = config["num_attention_heads"], config["num_key_value_heads"], config["intermediate_size"]
    features = len(config["dflash_config"]["target_layer_ids"]) * config.get("target_hidden_size", hidden)
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (hidden, features),
        "hidden_norm.weight": (hidden,),
        "norm.weight": (hidden,),
        "lm_head.weight": (target["vocab_size"], hidden),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": (head_dim,),
            p + "self_attn.k_norm.weight": (head_dim,),
            p + "mlp.gate_proj.weight": (inner, hidden),
            p + "mlp.up_proj.weight": (inner, hidden),
            p + "mlp.down_proj.weight": (hidden, inner),
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
        }
    return shapes


def write_drafter(out: Path, config: dict | None = None) -> Path:
    import torch
    from safetensors.torch import save_file

    write_tiny_model(out)
    config = config or recipe_config("drafter")
    generator = torch.Generator().manual_seed(SEED + 1)
    tensors = {}
    for name, shape in drafter_tensors(config, recipe_config("target")).items():
        if name.endswith("norm.weight"):
            tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
        else:
            tensors[name] = (torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def write_checkpoints(models: Path) -> tuple[Path, Path]:
    """``models``/target and ``models``/drafter (replaced when there)."""
    for name in ("target", "drafter"):
        shutil.rmtree(models / name, ignore_errors=True)
    return write_target(models / "target"), write_drafter(models / "drafter")
