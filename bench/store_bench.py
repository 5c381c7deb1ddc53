#!/usr/bin/env python3
"""What a build step costs on each Docker image store: the same cold builds on the main test engine
(the classic image store) and on the second (tests/infra/engine28.sh: Docker 28.5, the containerd
image store), on the amd64 synthetic base, one engine after the other, in the same run.

For each engine, medians of ``--runs`` runs, each build without cache and new to the engine (its
image removed after it):

- our overlay, cold, without an oracle record (the gate imports vLLM), with each Dockerfile step's
  time;
- the reference overlay (bench/reference_overlay.py: two COPYs and two RUNs), cold;
- one config-only step: ``FROM base`` and one ``LABEL`` of a new value. It writes no file, so its
  time is what the store charges any step besides the step's own work.

On the containerd store the classic builder commits every step by comparing the step's whole tree
with its parent's (docs/publishing.md), so a step costs time that grows with the base. The ratios
say how much of a build that is, against the same build on the classic store.

Writes a JSON document (``--out``), merged into an existing one if present.

    PYTHONPATH=.:tests python bench/store_bench.py [--runs N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import reference_overlay  # bench/, this script's directory
from infra import harness  # tests/ on PYTHONPATH
from overlay_bench import log_in, median_of, ratio, remove_image, timed_build
from stack_e2e import recipe_copy

from stackbuild.core.recipe import load_recipe
from stackbuild.core.reference import ImageReference
from stackbuild.image.connect import connect
from stackbuild.image.engine import DEFAULT_SOCKET
from stackbuild.image.plan import make_plan

REPO = Path(__file__).resolve().parent.parent


def label_step(engine, base_ref: str, platform: str, epoch: int) -> float:
    """Seconds of a cold build of ``FROM base`` + one LABEL (the FROM itself takes no time)."""
    with tempfile.TemporaryDirectory(prefix="bench-label-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(f"ARG BASE\nFROM ${{BASE}}\nLABEL org.glm53.bench.epoch={epoch}\n")
        start = time.perf_counter()
        image_id = ""
        for chunk in engine.client.api.build(
            path=tmp, buildargs={"BASE": base_ref}, platform=platform, nocache=True, rm=True, pull=False, decode=True
        ):
            if "error" in chunk:
                raise RuntimeError(f"the one-LABEL build failed: {chunk['error'].strip()}")
            image_id = (chunk.get("aux") or {}).get("ID") or image_id
        seconds = time.perf_counter() - start
    remove_image(engine, image_id)
    return seconds


def on_engine(host: str, base_ref: str, plan, runs: int, epoch: int) -> dict:
    """The three kinds of cold build on the engine at ``host``, ``runs`` times each, in turn."""
    os.environ["DOCKER_HOST"] = host
    engine = connect()
    engine.pull(plan.base.reference, plan.recipe.platform, lambda event: None)
    ours, ours_steps, reference, label = [], {}, [], []
    for _ in range(runs):
        image_id, seconds, steps = timed_build(engine, plan, nocache=True)
        remove_image(engine, image_id)
        ours.append(seconds)
        for name, step_seconds in steps.items():
            ours_steps.setdefault(name, []).append(step_seconds)
        epoch += 1
        built = reference_overlay.build(engine, base_ref, plan.recipe.platform, "reference", epoch)
        remove_image(engine, built.image_id)
        reference.append(built.seconds)
        label.append(label_step(engine, base_ref, plan.recipe.platform, epoch))
    return {
        "engine": engine.about().line,
        "ours_cold_no_record_s": median_of(ours),
        "ours_cold_steps_s": {name: median_of(values) for name, values in ours_steps.items()},
        "reference_cold_s": median_of(reference),
        "one_label_step_s": median_of(label),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench.json")
    args = parser.parse_args()

    base = harness.base_image("amd64")
    base_ref = str(ImageReference(base.image, digest=base.digest))
    creds = harness.registry_credentials()
    os.environ["SOURCE_DATE_EPOCH"] = epoch = str(int(time.time()))
    tmp = Path(tempfile.mkdtemp(prefix="store-bench-"))
    log_in(tmp, creds)
    recipe = load_recipe(recipe_copy(tmp, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest))
    plan = make_plan(recipe, repository=f"{creds.url}/bench-store/glm53-b200")
    classic_host = os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    stores = {
        "classic": on_engine(classic_host, base_ref, plan, args.runs, int(epoch)),
        "containerd": on_engine(harness.engine28_host(), base_ref, plan, args.runs, int(epoch) + 1000),
    }
    classic, containerd = stores["classic"], stores["containerd"]
    result = {
        "image_stores": {
            "base": base_ref,
            "base_bytes": base.size_bytes,
            **stores,
            "containerd_to_classic": {
                "ours_cold": ratio(containerd["ours_cold_no_record_s"], classic["ours_cold_no_record_s"]),
                "reference_cold": ratio(containerd["reference_cold_s"], classic["reference_cold_s"]),
                "one_label_step": ratio(containerd["one_label_step_s"], classic["one_label_step_s"]),
            },
        }
    }
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    data.update(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
