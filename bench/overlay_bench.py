#!/usr/bin/env python3
"""Benchmark the overlay build, its layers and its push on the local engine and registry.

Needs the test services and the amd64 synthetic base (``tests/infra/run-bench.sh``
brings them up). Each figure is the median of ``--runs`` runs:

- cold build: the previous result and its intermediate images removed, so no step is cached
  (and the time of each Dockerfile step, to show where it goes), twice over: with the
  recipe's oracle record (``build.py record``: the gate holds the simulator to vLLM's
  recorded answer) and without one (the gate imports vLLM, as a recipe's first build does);
- warm build: the same build again, nothing changed;
- overlay layers: bytes the overlay adds on top of the base, unpacked (the engine's layer
  sizes) and as the registry stores them (the compressed blobs its manifest lists);
- reference and floor (bench/reference_overlay.py): a seed-shaped overlay and the same
  overlay importing only vLLM's KV-cache planner, built cold on the same base, one of each
  after every cold build of ours; the ratios of our cold builds to the reference's;
- gate profile (bench/gate_profile.py): where the gate step's time goes above the floor;
- arm64 (``--arm64``): a cold build of the arm64 recipe without a record on the arm64
  synthetic base, through qemu on an amd64 machine (minutes);
- push: bytes the registry stored for a push of the image to a new repository when
  the base is already in that registry, against the overlay's compressed blobs: a push
  that re-sent anything of the base, or sent a layer twice, shows as a ratio above 1.

Writes a JSON document (``--out``), merged into an existing one if present.

    PYTHONPATH=tests python bench/overlay_bench.py [--runs N] [--out FILE]   (tests/ holds the e2e helpers)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import gate_profile  # bench/, this script's directory
import reference_overlay
from infra import harness  # tests/ on PYTHONPATH
from stack_e2e import recipe_copy

from geometry.image_contract import GATE_STEP
from stackbuild.core.recipe import load_recipe
from stackbuild.core.reference import ImageReference
from stackbuild.image.connect import connect
from stackbuild.image.engine import DockerEngine
from stackbuild.image.oracle_record import save_from_image
from stackbuild.image.plan import make_plan
from stackbuild.image.platform_build import build_image
from stackbuild.image.progress import Progress

REPO = Path(__file__).resolve().parent.parent

TARGETS = {
    # The first cold build against the seed-shaped reference (docs/benchmarks.md says why importing vLLM's
    # planner alone, the floor, is already above it).
    "cold_to_reference": 1.5,
    "cold_with_record_to_reference": 1.0,
    "cold_build_s": 10.0,
    "warm_build_s": 2.0,
    "overlay_layers_bytes": 1024 * 1024,
    "push_upload_ratio": 1.1,
}


def median_of(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "runs": [round(v, 3) for v in values]}


def overlay_layers(engine: DockerEngine, image_id: str, base_ref: str) -> list[dict]:
    """History entries above the base: (instruction, size) of what the overlay adds."""
    image = engine.client.api.history(image_id)
    base = engine.client.api.history(base_ref)
    added = image[: len(image) - len(base)]
    return [{"created_by": h.get("CreatedBy", "")[:120], "bytes": int(h.get("Size") or 0)} for h in reversed(added)]


def registry_bytes(storage: Path) -> int:
    return sum(p.stat().st_size for p in storage.rglob("*") if p.is_file())


def manifest_layers(storage: Path, digest: str) -> list[tuple[str, int]]:
    """(layer blob digest, compressed size) in order, from a manifest in the registry's storage."""
    algorithm, hexdigest = digest.split(":", 1)
    blob = storage / "docker" / "registry" / "v2" / "blobs" / algorithm / hexdigest[:2] / hexdigest / "data"
    return [(layer["digest"], int(layer["size"])) for layer in json.loads(blob.read_text())["layers"]]


def remove_image(engine: DockerEngine, image_id: str) -> None:
    try:
        engine.client.api.remove_image(image_id, force=True, noprune=False)
    except Exception:  # already gone
        pass


def timed_build(
    engine, plan, *, nocache: bool, instructions: dict | None = None
) -> tuple[str, float, dict[str, float]]:
    """Build once: the image id, the wall time, and each Dockerfile step's time by name
    (and each step's instruction by name into ``instructions``)."""
    events = io.StringIO()
    progress = Progress(json_lines=True, stream=events)
    start = time.perf_counter()
    image_id = build_image(engine, plan, progress, nocache=nocache)
    seconds = time.perf_counter() - start
    steps = {}
    for line in events.getvalue().splitlines():
        event = json.loads(line)
        if event.get("event") == "step_done":
            steps[event["name"]] = event["seconds"]
        if event.get("event") == "step" and instructions is not None:
            instructions[event["name"]] = event["instruction"]
    return image_id, seconds, steps


def log_in(tmp: Path, creds) -> None:
    """`docker login` to the test registry in a Docker config of its own under ``tmp``, made this process's."""
    config_dir = tmp / "docker-config"
    config_dir.mkdir()
    login = harness.docker_login(config_dir, creds)
    if login.returncode != 0:
        raise SystemExit(f"docker login to {creds.url} failed: {login.stderr.strip()}")
    os.environ["DOCKER_CONFIG"] = str(config_dir)


def ratio(numerator: dict, denominator: dict) -> float:
    return round(numerator["median"] / denominator["median"], 3)


def arm64_cold_builds(engine, tmp: Path, runs: int) -> dict:
    """Cold builds of the arm64 recipe without a record on the arm64 base (qemu on an amd64 machine)."""
    base = harness.base_image("arm64")
    recipe_path = recipe_copy(tmp, "glm53-flash-dflash2-gb300", base=base.image, tag=base.tag, digest=base.digest)
    plan = make_plan(load_recipe(recipe_path), repository=f"{harness.registry_url()}/bench-arm64/glm53-gb300")
    times, per_step, image_id = [], {}, None
    for _ in range(runs):
        if image_id:
            remove_image(engine, image_id)
        image_id, seconds, steps = timed_build(engine, plan, nocache=True)
        times.append(seconds)
        for name, step_seconds in steps.items():
            per_step.setdefault(name, []).append(step_seconds)
    if image_id:
        remove_image(engine, image_id)
    return {
        "base": str(ImageReference(base.image, digest=base.digest)),
        "platform": plan.recipe.platform,
        "cold_no_record_s": median_of(times),
        "cold_no_record_steps_s": {name: median_of(v) for name, v in per_step.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench.json")
    parser.add_argument("--arm64", action="store_true", help="also a cold build of the arm64 recipe through qemu")
    parser.add_argument("--arm64-runs", type=int, default=1)
    args = parser.parse_args()

    base = harness.base_image("amd64")
    creds = harness.registry_credentials()
    # An epoch of its own: the overlay layers are then new to the engine and to the
    # registry (reproducible builds would otherwise find them already pushed), so the
    # push measures real uploads.
    os.environ["SOURCE_DATE_EPOCH"] = str(int(time.time()))
    tmp = Path(tempfile.mkdtemp(prefix="overlay-bench-"))
    log_in(tmp, creds)

    recipe_path = recipe_copy(tmp, "b200-amd64", base=base.image, tag=base.tag, digest=base.digest)
    recipe = load_recipe(recipe_path)
    repository = f"{creds.url}/bench-{uuid.uuid4().hex[:8]}/glm53-b200"
    plan = make_plan(recipe, repository=repository)
    engine = connect()
    base_ref = str(ImageReference(base.image, digest=base.digest))

    epoch = int(os.environ["SOURCE_DATE_EPOCH"])
    seeds: dict[str, list[float]] = {"reference": [], "floor": []}
    seed_steps: dict[str, dict[str, list[float]]] = {"reference": {}, "floor": {}}
    instructions: dict[str, str] = {}

    def seed_builds():
        """One cold build of the reference and of the floor overlay, each new to the engine."""
        nonlocal epoch
        for kind in seeds:
            epoch += 1
            built = reference_overlay.build(engine, base_ref, recipe.platform, kind, epoch)
            seeds[kind].append(built.seconds)
            for name, step_seconds in built.steps.items():
                seed_steps[kind].setdefault(name, []).append(step_seconds)
            remove_image(engine, built.image_id)

    def cold_builds(plan, image_id, warm=None):
        times, per_step = [], {}
        for _ in range(args.runs):
            if image_id:
                remove_image(engine, image_id)
            image_id, seconds, steps = timed_build(engine, plan, nocache=True, instructions=instructions)
            times.append(seconds)
            for name, step_seconds in steps.items():
                per_step.setdefault(name, []).append(step_seconds)
            if warm is not None:
                warm.append(timed_build(engine, plan, nocache=False)[1])
            seed_builds()
        return image_id, times, per_step

    # No record: the gate imports vLLM (and leaves its answer in the image).
    image_id, cold_importing, cold_importing_steps = cold_builds(plan, None)
    save_from_image(engine, image_id, recipe, plan.gate_input, plan.payload_dir)
    profile = gate_profile.profile_gate(engine, image_id, instructions[GATE_STEP])
    plan = make_plan(load_recipe(recipe_path), repository=repository)
    assert plan.oracle_record is not None, plan.oracle_record_note
    warm: list[float] = []
    image_id, cold, cold_steps = cold_builds(plan, image_id, warm)

    layers = overlay_layers(engine, image_id, base_ref)
    layer_bytes = sum(layer["bytes"] for layer in layers)

    storage = harness.state_dir() / "registry" / "storage"
    before = registry_bytes(storage)
    tag = plan.pinned_tag
    engine.tag(image_id, repository, tag)
    start = time.perf_counter()
    digest = engine.push(repository, tag, lambda event: None)
    push_seconds = time.perf_counter() - start
    uploaded = registry_bytes(storage) - before
    # The overlay's blobs are those above the base's layers: the engine may have compressed the base's
    # layers into blobs of its own (other digests than the base manifest's), the same files all the same.
    base_layer_count = len(manifest_layers(storage, base.digest))
    blob_bytes = sum(size for _, size in manifest_layers(storage, digest)[base_layer_count:])

    result = {
        "overlay_build": {
            "base": base_ref,
            "platform": recipe.platform,
            "cold_s": median_of(cold),
            "cold_steps_s": {name: median_of(values) for name, values in cold_steps.items()},
            "cold_importing_vllm_s": median_of(cold_importing),
            "cold_importing_vllm_steps_s": {name: median_of(values) for name, values in cold_importing_steps.items()},
            "warm_s": median_of(warm),
        },
        "reference_overlay": {
            "what": "seed-shaped: two COPYs, a RUN editing one vLLM file, a RUN importing torch and "
            "vllm.v1.kv_cache_interface to assert two page sizes",
            "cold_s": median_of(seeds["reference"]),
            "cold_steps_s": {name: median_of(v) for name, v in seed_steps["reference"].items()},
        },
        "floor_overlay": {
            "what": "the reference with its last RUN importing only vllm.v1.core.kv_cache_utils",
            "cold_s": median_of(seeds["floor"]),
            "cold_steps_s": {name: median_of(v) for name, v in seed_steps["floor"].items()},
        },
        "gate_profile": profile,
        "overlay_layers": {"bytes": layer_bytes, "blob_bytes": blob_bytes, "layers": layers},
        "push": {
            "repository": repository,
            "digest": digest,
            "seconds": round(push_seconds, 3),
            "registry_bytes_added": uploaded,
            "ratio_to_overlay_blobs": round(uploaded / blob_bytes, 3) if blob_bytes else None,
        },
        "targets": TARGETS,
    }
    build = result["overlay_build"]
    reference = result["reference_overlay"]["cold_s"]
    result["ratios_to_reference"] = {
        "cold_no_record": ratio(build["cold_importing_vllm_s"], reference),
        "cold_with_record": ratio(build["cold_s"], reference),
        "floor": ratio(result["floor_overlay"]["cold_s"], reference),
        "cold_no_record_to_floor": ratio(build["cold_importing_vllm_s"], result["floor_overlay"]["cold_s"]),
    }
    if args.arm64:
        result["arm64_qemu"] = arm64_cold_builds(engine, tmp, args.arm64_runs)
    result["meets_targets"] = {
        "cold_no_record_to_reference": result["ratios_to_reference"]["cold_no_record"] <= TARGETS["cold_to_reference"],
        "cold_with_record_to_reference": result["ratios_to_reference"]["cold_with_record"]
        <= TARGETS["cold_with_record_to_reference"],
        "cold_build": result["overlay_build"]["cold_s"]["median"] < TARGETS["cold_build_s"],
        "cold_build_importing_vllm": result["overlay_build"]["cold_importing_vllm_s"]["median"]
        < TARGETS["cold_build_s"],
        "warm_build": result["overlay_build"]["warm_s"]["median"] < TARGETS["warm_build_s"],
        "overlay_layers": layer_bytes < TARGETS["overlay_layers_bytes"],
        "push": bool(blob_bytes) and uploaded <= TARGETS["push_upload_ratio"] * blob_bytes,
    }
    remove_image(engine, image_id)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(args.out.read_text()) if args.out.is_file() else {}
    data.update(result)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
