"""vLLM's model-info cache for the architectures the real-server tests serve, as a layer of the CPU
serving base (tests/infra/serving_base.py).

At each start vLLM resolves the served model's architecture, and the drafter's, through
``vllm/model_executor/models/registry.py``: ``_LazyRegisteredModel.inspect_model_cls`` reads
``$VLLM_CACHE_ROOT/modelinfos/<module>-<class>.json`` and, when it is missing or its hash (of the model
module's source) is not the module's, imports the model in a fresh Python to write it: some 8 s of one
core per architecture per start on the test machine. A server started a second time on the same cache
finds the file. The layer holds what vLLM wrote for each architecture of the test recipes' configs, at
the image's default cache root (/root/.cache/vllm, where the compose files' cache volume is mounted and
from which Docker fills a new volume), so every test server starts as a second start would; a file
whose module an overlay edits no longer matches its hash and vLLM inspects that model again.

The files are written by vLLM's own ``inspect_model_cls`` run in the image, with its subprocess run in
the same process (that subprocess exists to keep CUDA out of the server's process; there is none here).
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from pathlib import Path

import build_base  # tests/infra, this script's directory
import harness

RECIPES = harness.HERE.parent / "recipes"
CACHE_ROOT = "root/.cache/vllm"  # vLLM's default VLLM_CACHE_ROOT for root, relative to /
SEED = """
import sys
from pathlib import Path
from vllm.model_executor.models import registry
registry._run_in_subprocess = lambda fn: fn()
for arch in sys.argv[1:]:
    model = registry.ModelRegistry.models.get(arch)
    if model is None:
        print(f"{arch}: not in this vLLM's registry, not cached")
        continue
    try:
        info = model.inspect_model_cls()
    except Exception as error:  # a model this image cannot import is one it cannot serve either
        print(f"{arch}: not importable here ({type(error).__name__}: {error}), not cached")
        continue
    print(f"{arch}: cached")
print(*sorted(p.name for p in Path(registry.envs.VLLM_CACHE_ROOT, "modelinfos").glob("*.json")))
"""


def served_architectures() -> tuple[str, ...]:
    """Every architecture the test recipes' target and drafter configs name (the servers' models)."""
    names = set()
    for config in RECIPES.glob("*/configs/*.json"):
        names.update(json.loads(config.read_text()).get("architectures", []))
    return tuple(sorted(names))


def modelinfo_layer(image: str, out: Path) -> tuple[Path, str]:
    """A layer tarball at ``out`` (in a directory of the caller's, removed on failure) with what vLLM in
    ``image`` caches for the served architectures, and vLLM's own lines about it. Reproducible: fixed
    owner, mode and time, files in name order."""
    with tempfile.TemporaryDirectory(prefix="modelinfos-") as tmp:
        run = build_base.docker(
            "run", "--rm", "--network", "none", "-v", f"{tmp}:/seed", "-e", "VLLM_CACHE_ROOT=/seed",
            "-e", "VLLM_TARGET_DEVICE=cpu", "--entrypoint", "python3", image, "-c", SEED, *served_architectures(),
            capture=True, check=False,
        )  # fmt: skip
        files = sorted((Path(tmp) / "modelinfos").glob("*.json"))
        if run.returncode != 0 or not files:
            raise SystemExit(f"[model_infos] vLLM in {image} wrote no model info: {(run.stderr or run.stdout)[-2000:]}")
        with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
            for depth, directory in enumerate(("root", "root/.cache", CACHE_ROOT, f"{CACHE_ROOT}/modelinfos")):
                tar.addfile(_entry(directory, tarfile.DIRTYPE, 0o700 if depth == 0 else 0o755))
            for path in files:
                entry = _entry(f"{CACHE_ROOT}/modelinfos/{path.name}", tarfile.REGTYPE, 0o644)
                entry.size = path.stat().st_size
                with open(path, "rb") as data:
                    tar.addfile(entry, fileobj=data)
    return out, run.stdout.strip()


def _entry(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    entry = tarfile.TarInfo(name)
    entry.type, entry.mode, entry.mtime, entry.uid, entry.gid = kind, mode, 0, 0, 0
    return entry
