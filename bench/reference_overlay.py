"""Seed-shaped overlays to measure our overlay's cold build against, on the same base in the same run.

The published overlay (the one our build replaces) is four steps on the vLLM base: two
small COPYs, a RUN that edits one vLLM file, and a RUN that imports torch and
``vllm.v1.kv_cache_interface`` to assert two page sizes. ``reference`` rebuilds that
shape. ``floor`` is the same overlay whose last RUN only imports
``vllm.v1.core.kv_cache_utils``: the least a gate that runs vLLM's own KV-cache planning
has to import, so no gate that keeps that cross-check can build faster than it.

Both are built without cache and with a COPY whose content is new each time (the
SOURCE_DATE_EPOCH the bench sets), like the bench's cold builds of our overlay.
"""

from __future__ import annotations

import io
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from stackbuild.image.progress import Progress

PAYLOAD = "/opt/reference-overlay"

# Edits one vLLM file in place, as the published overlay's patch step does (finding the
# package without importing it).
EDIT_ONE_FILE = """\
import importlib.util, pathlib
path = pathlib.Path(importlib.util.find_spec("vllm").origin).parent / "v1" / "worker" / "utils.py"
text = path.read_text()
path.write_text(text + "\\n# reference overlay: drafter block fitted to the target page\\n")
"""

# Two page sizes that must be equal, written out by hand: the target's MLA latent page
# (1 KV head slot, 512 + 64 latent dims, fp8 = 1 byte) at block 2048 is 2048 * 576 =
# 1,179,648 B; a BF16 drafter layer (8 KV heads, head 128, K and V, 2 bytes) costs
# 8 * 256 * 2 = 4,096 B per token, so its page at block 288 is 288 * 4,096 = 1,179,648 B.
ASSERT_PAGES = """\
import torch
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec
target = MLAAttentionSpec(block_size=2048, num_kv_heads=1, head_size=576, dtype=torch.uint8, cache_dtype_str="fp8")
drafter = FullAttentionSpec(block_size=288, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
assert target.page_size_bytes == 2048 * 576 == 1179648, target.page_size_bytes
assert drafter.page_size_bytes == 288 * 8 * 256 * 2 == 1179648, drafter.page_size_bytes
print("pages", target.page_size_bytes, drafter.page_size_bytes)
"""

IMPORT_PLANNER = """\
import vllm.v1.core.kv_cache_utils
print("imported", vllm.v1.core.kv_cache_utils.__name__)
"""

CHECKS = {"reference": ASSERT_PAGES, "floor": IMPORT_PLANNER}


@dataclass(frozen=True)
class Built:
    image_id: str
    seconds: float
    steps: dict[str, float]  # "RUN python3 .../check.py" -> seconds


def write_context(directory: Path, kind: str, epoch: int) -> Path:
    """A build context for ``kind`` ("reference" or "floor") on ``FROM base`` (a build argument)."""
    (directory / "patch").mkdir(parents=True)
    (directory / "check").mkdir()
    (directory / "patch" / "edit.py").write_text(EDIT_ONE_FILE)
    (directory / "check" / "check.py").write_text(CHECKS[kind])
    (directory / "check" / "epoch").write_text(f"{epoch}\n")
    (directory / "Dockerfile").write_text(
        "ARG BASE\n"
        "FROM ${BASE}\n"
        f"COPY patch/ {PAYLOAD}/patch/\n"
        f"COPY check/ {PAYLOAD}/check/\n"
        f"RUN python3 {PAYLOAD}/patch/edit.py\n"
        f"RUN python3 {PAYLOAD}/check/check.py\n"
    )
    return directory


def build(engine, base_ref: str, platform: str, kind: str, epoch: int) -> Built:
    """One cold build of ``kind`` on ``base_ref``: image id, wall seconds, seconds per step."""
    events = io.StringIO()
    progress = Progress(json_lines=True, stream=events)
    with tempfile.TemporaryDirectory(prefix=f"bench-{kind}-") as tmp:
        context = write_context(Path(tmp) / "context", kind, epoch)
        start = time.perf_counter()
        outcome = engine.client.api.build(
            path=str(context),
            buildargs={"BASE": base_ref},
            platform=platform,
            nocache=True,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        image_id = ""
        for chunk in outcome:
            if "error" in chunk:
                raise RuntimeError(f"{kind} overlay build failed: {chunk['error'].strip()}")
            line = chunk.get("stream", "")
            if line.startswith("Step "):
                number, instruction = line[5:].split(" : ", 1)
                step, total = number.split("/")
                progress.build_event({"step": int(step), "total": int(total), "instruction": instruction.strip()})
            aux = chunk.get("aux") or {}
            if aux.get("ID"):
                image_id = aux["ID"]
        progress.end_step()
        seconds = time.perf_counter() - start
    if not image_id:
        raise RuntimeError(f"{kind} overlay build returned no image id")
    steps = {}
    for line in events.getvalue().splitlines():
        event = json.loads(line)
        if event.get("event") == "step":
            names = event.get("instruction", "")
        if event.get("event") == "step_done":
            steps[names[:80]] = event["seconds"]
    return Built(image_id, seconds, steps)
