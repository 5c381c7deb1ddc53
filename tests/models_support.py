"""A models directory laid out as `compose --models-dir` mounts it (synthetic checkpoints),
and a drafter that cannot fit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from support.repo import REPO

CONFIGS = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "configs"
TARGET_DIR, DRAFTER_DIR = "GLM-5.3-Flash-NVFP4", "GLM-5.3-Flash-DFlash2"  # under /models in the recipe


def misfit_drafter() -> dict:
    """The snapshot drafter with 4 KV heads x head_dim 80: 4 * 80 * 2 (K, V) * 2 B (bf16) = 1,280 B/token,
    and the target's attention page 4,718,592 B = 2**19 * 9 is not a multiple of 1,280 = 2**8 * 5."""
    data = json.loads((CONFIGS / "drafter.config.json").read_text())
    data["num_key_value_heads"], data["head_dim"] = 4, 80
    return data


# --- synthetic checkpoints: tiny safetensors files written by the safetensors library ---------

COMMIT = {"target": "1" * 40, "drafter": "2" * 40}  # the snapshot commits of checkpoint_cache()
REPOS = {"target": "local-inference-lab/GLM-5.3-Flash-NVFP4", "drafter": "incoai/GLM-5.3-Flash-DFlash2"}
NVFP4_QUANT_CONFIG = {
    "producer": {"name": "modelopt", "version": "0.29.0"},
    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16},
}
# A header dtype -> the library's name for it and the bytes of one element (the library refuses a
# tensor whose data is not its shape times that width, so a wrong width here fails the writer).
LIBRARY_DTYPES = {
    "BF16": ("bfloat16", 2),
    "F32": ("float32", 4),
    "U8": ("uint8", 1),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E8M0": ("float8_e8m0fnu", 1),
}


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None) -> bytes:
    """A safetensors file as the safetensors library writes it: name -> (dtype, shape); the data is zeros.

    The library's own serializer, the one safetensors.numpy.save and safetensors.torch.save call, is
    given each tensor's bytes directly: numpy has no bfloat16 or float8 arrays to hand it."""
    import ctypes

    import safetensors

    buffers, specs = [], {}
    for name, (dtype, shape) in tensors.items():
        library_name, width = LIBRARY_DTYPES[dtype]
        n = width
        for dim in shape:
            n *= dim
        buffers.append(ctypes.create_string_buffer(max(n, 1)))  # alive until serialize returns
        specs[name] = safetensors.TensorSpec(
            dtype=library_name, shape=shape, data_ptr=ctypes.addressof(buffers[-1]), data_len=n
        )
    return bytes(safetensors.serialize(specs, metadata=metadata))


def target_files(shards: int = 2) -> dict[str, bytes]:
    """A target checkpoint (NVFP4 as ModelOpt writes it: U8 packed weights, F8 scales) in ``shards`` shards."""
    files, weight_map = {}, {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {
            f"model.layers.{i}.mlp.weight": ("U8", [16, 8]),
            f"model.layers.{i}.mlp.weight_scale": ("F8_E4M3", [16, 1]),
            f"model.layers.{i}.input_layernorm.weight": ("BF16", [16]),
        }
        files[name] = safetensors_bytes(tensors)
        weight_map.update({t: name for t in tensors})
    files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    files["hf_quant_config.json"] = json.dumps(NVFP4_QUANT_CONFIG).encode()
    files["tokenizer.json"] = b'{"version": "1.0", "model": {"type": "BPE"}}'
    files["tokenizer_config.json"] = json.dumps({"chat_template": "{{ messages }}"}).encode()
    return files


def drafter_files() -> dict[str, bytes]:
    """A BF16 drafter in one file."""
    return {
        "model.safetensors": safetensors_bytes(
            {"model.layers.0.self_attn.q_proj.weight": ("BF16", [8, 8]), "model.norm.weight": ("BF16", [8])}
        )
    }


def _write(directory: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (directory / name).write_bytes(data)


def add_weights(directory: Path, role: str) -> None:
    """The synthetic safetensors (and tokenizer) of a ``target`` or ``drafter`` checkpoint next to its config."""
    _write(Path(directory), target_files() if role == "target" else drafter_files())


def models_dir(root: Path, drafter: dict | None = None) -> Path:
    """``root`` laid out as `compose --models-dir` mounts it at /models: one plain directory per checkpoint,
    each a whole synthetic checkpoint (configs, safetensors shards, tokenizer)."""
    (root / TARGET_DIR).mkdir(parents=True)
    (root / DRAFTER_DIR).mkdir(parents=True)
    shutil.copyfile(CONFIGS / "target.config.json", root / TARGET_DIR / "config.json")
    if drafter is None:
        shutil.copyfile(CONFIGS / "drafter.config.json", root / DRAFTER_DIR / "config.json")
    else:
        (root / DRAFTER_DIR / "config.json").write_text(json.dumps(drafter))
    add_weights(root / TARGET_DIR, "target")
    add_weights(root / DRAFTER_DIR, "drafter")
    return root


def cache_snapshot(hub: Path, repo: str, commit: str, files: dict[str, bytes]) -> Path:
    """A Hugging Face cache entry: blobs/<sha256> holding the bytes, snapshots/<commit>/<name> -> ../../blobs/...,
    refs/main naming the commit. Returns the snapshot directory."""
    import hashlib

    entry = hub / ("models--" + repo.replace("/", "--"))
    (entry / "blobs").mkdir(parents=True, exist_ok=True)
    (entry / "refs").mkdir(exist_ok=True)
    snapshot = entry / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (entry / "blobs" / blob).write_bytes(data)
        (snapshot / name).symlink_to(Path("..", "..", "blobs", blob))
    (entry / "refs" / "main").write_text(commit)
    return snapshot


def cache_models_dir(root: Path, commits: dict[str, str] | None = None) -> Path:
    """``root`` as `compose --models-dir` mounts it, each checkpoint a Hugging Face cache snapshot that the
    recipe's directory name links to (relative links: they resolve inside the container too); ``commits``:
    a role's snapshot commit other than COMMIT's."""
    root.mkdir(parents=True)
    for role, name in (("target", TARGET_DIR), ("drafter", DRAFTER_DIR)):
        config = (CONFIGS / f"{role}.config.json").read_bytes()
        files = {"config.json": config, **(target_files() if role == "target" else drafter_files())}
        snapshot = cache_snapshot(root / "hub", REPOS[role], {**COMMIT, **(commits or {})}[role], files)
        (root / name).symlink_to(snapshot.relative_to(root))
    return root
