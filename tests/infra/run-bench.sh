#!/usr/bin/env bash
# `make bench`: services and the amd64 synthetic base up, then the benchmarks, written to out/bench.json:
#   geometry  one gate check and a 1,000-scenario sweep (bench/geometry_bench.py)
#   overlay   cold and warm overlay builds, the overlay's layer bytes, bytes a push uploads
#             when the base is already in the registry (bench/overlay_bench.py)
#   preflight what the image's entrypoint adds on its fast path (bench/preflight_bench.py)
source "$(dirname "${BASH_SOURCE[0]}")/preamble.sh"
out="$repo/out/bench.json"
mkdir -p out
trap '[[ "${INFRA_KEEP_UP:-0}" == 1 ]] || $SUDO bash "$here/services.sh" down || true' EXIT

$SUDO bash "$here/services.sh" up >/dev/null
"$PY" "$here/build_base.py" --arch amd64
"$PY" bench/geometry_bench.py --out out/geometry-bench.json >/dev/null
"$PY" bench/preflight_bench.py --out out/preflight-bench.json >/dev/null
"$PY" bench/overlay_bench.py --runs "${BENCH_RUNS:-3}" --out "$out" >/dev/null
"$PY" - "$out" out/geometry-bench.json out/preflight-bench.json <<'PYEOF'
import json, sys
path, geometry, preflight = sys.argv[1], sys.argv[2], sys.argv[3]
data = json.load(open(path))
data["geometry"] = json.load(open(geometry))
data.update(json.load(open(preflight)))
json.dump(data, open(path, "w"), indent=2)
summary = {k: data[k] for k in ("overlay_build", "push", "meets_targets", "preflight_fast_path")}
summary["overlay_layers_bytes"] = data["overlay_layers"]["bytes"]
summary["overlay_blob_bytes"] = data["overlay_layers"]["blob_bytes"]
print(json.dumps(summary, indent=2))
PYEOF
echo "wrote $out"
