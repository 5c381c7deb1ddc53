#!/usr/bin/env bash
# `make bench`: services and the amd64 synthetic base up, then the benchmarks, written to out/bench.json:
#   geometry  one gate check and a 1,000-scenario sweep (bench/geometry_bench.py)
#   overlay   cold and warm overlay builds, the overlay's layer bytes, bytes a push uploads
#             when the base is already in the registry (bench/overlay_bench.py)
#             against a seed-shaped reference overlay and the planning-import floor built
#             cold in the same run, and where the gate's time goes (-X importtime)
#   preflight what the image's entrypoint adds on its fast path (bench/preflight_bench.py), and
#             the headers of a 40-shard checkpoint read (bench/checkpoint_bench.py)
#   fit       one recipe's `build.py fit` search beside one `geometry` run (bench/fit_bench.py)
#   together  the default recipe's requests-sent-together rows, steady decodes frozen beside every
#             request stepped one step at a time: the same counts, and each one's time
#             (bench/together_bench.py)
#   image_stores  cold builds of ours, the reference and a one-LABEL Dockerfile on the classic image
#             store (the main engine) and on the containerd image store (engine28.sh: Docker 28.5),
#             what each step costs on each (bench/store_bench.py)
#   ci_phases the last `make test` run's phases on this checkout (tests/infra/ci_phases.py over
#             out/test-run/: each base build and its steps, pytest's wall time, the five slowest
#             modules), from that run's own timings
# BENCH_ARM64=1 adds cold builds of the arm64 recipe through qemu (BENCH_ARM64_RUNS, default 1).
source "$(dirname "${BASH_SOURCE[0]}")/preamble.sh"
out="$repo/out/bench.json"
mkdir -p out
trap '[[ "${INFRA_KEEP_UP:-0}" == 1 ]] || { $SUDO bash "$here/engine28.sh" down; $SUDO bash "$here/services.sh" down; } || true' EXIT

$SUDO bash "$here/services.sh" up >/dev/null
$SUDO bash "$here/engine28.sh" up >/dev/null
"$PY" "$here/build_base.py" --arch amd64
arm64=()
if [[ "${BENCH_ARM64:-0}" == 1 ]]; then
  "$PY" "$here/build_base.py" --arch arm64
  arm64=(--arm64 --arm64-runs "${BENCH_ARM64_RUNS:-1}")
fi
# tests/ holds the helpers two benchmarks share with the test suite (geometry_cases, the e2e harness),
# as pytest's pythonpath has it; the repository comes first, or tests/geometry (a directory without
# __init__.py) would stand in for the project's geometry package.
PYTHONPATH=.:tests "$PY" bench/geometry_bench.py --out out/geometry-bench.json >/dev/null
"$PY" bench/preflight_bench.py --out out/preflight-bench.json >/dev/null
"$PY" bench/fit_bench.py --out out/fit-bench.json >/dev/null
"$PY" bench/together_bench.py --out out/together-bench.json >/dev/null 2>&1
"$PY" bench/checkpoint_bench.py --out out/checkpoint-bench.json >/dev/null
PYTHONPATH=.:tests "$PY" bench/overlay_bench.py --runs "${BENCH_RUNS:-3}" --out "$out" "${arm64[@]}" >/dev/null
PYTHONPATH=.:tests:bench "$PY" bench/store_bench.py --runs "${BENCH_RUNS:-3}" --out "$out" >/dev/null
phases=out/ci-phases-bench.json
"$PY" "$here/ci_phases.py" out/test-run --json >"$phases" 2>/dev/null || echo null >"$phases"
"$PY" - "$out" out/geometry-bench.json out/preflight-bench.json out/fit-bench.json out/checkpoint-bench.json "$phases" \
  out/together-bench.json <<'PYEOF'
import json, sys
path, geometry, preflight, fit, checkpoint, phases, together = sys.argv[1:8]
data = json.load(open(path))
data["geometry"] = json.load(open(geometry))
data["fit"] = json.load(open(fit))
data["together"] = json.load(open(together))
data.update(json.load(open(preflight)))
data.update(json.load(open(checkpoint)))
data["ci_phases"] = json.load(open(phases)) or {"none": "no `make test` run recorded in out/test-run/"}
json.dump(data, open(path, "w"), indent=2)
keys = ("overlay_build", "reference_overlay", "floor_overlay", "ratios_to_reference", "gate_profile",
        "arm64_qemu", "push", "image_stores", "meets_targets", "preflight_fast_path", "fit", "together", "checkpoint_headers", "ci_phases")
summary = {k: data[k] for k in keys if k in data}
summary["overlay_layers_bytes"] = data["overlay_layers"]["bytes"]
summary["overlay_blob_bytes"] = data["overlay_layers"]["blob_bytes"]
print(json.dumps(summary, indent=2))
PYEOF
echo "wrote $out"
