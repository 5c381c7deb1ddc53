"""A models directory laid out as `compose --models-dir` mounts it, and a drafter that cannot fit."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "recipes" / "glm53-flash-dflash2-gb300" / "configs"
TARGET_DIR, DRAFTER_DIR = "GLM-5.3-Flash-NVFP4", "GLM-5.3-Flash-DFlash2"  # under /models in the recipe


def models_dir(root: Path, drafter: dict | None = None) -> Path:
    """``root`` laid out as `compose --models-dir` mounts it at /models: one directory per checkpoint."""
    (root / TARGET_DIR).mkdir(parents=True)
    (root / DRAFTER_DIR).mkdir(parents=True)
    shutil.copyfile(CONFIGS / "target.config.json", root / TARGET_DIR / "config.json")
    if drafter is None:
        shutil.copyfile(CONFIGS / "drafter.config.json", root / DRAFTER_DIR / "config.json")
    else:
        (root / DRAFTER_DIR / "config.json").write_text(json.dumps(drafter))
    return root


def misfit_drafter() -> dict:
    """The snapshot drafter with 4 KV heads x head_dim 80: 4 * 80 * 2 (K, V) * 2 B (bf16) = 1,280 B/token,
    and the target's attention page 4,718,592 B = 2**19 * 9 is not a multiple of 1,280 = 2**8 * 5."""
    data = json.loads((CONFIGS / "drafter.config.json").read_text())
    data["num_key_value_heads"], data["head_dim"] = 4, 80
    return data
