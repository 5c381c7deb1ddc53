#!/usr/bin/env bash
# `make bench`: bring the services and bases up (timed), run the benchmarks, write out/bench.json.
# Benchmarks: tests/bench*.py / bench/ when present (run with pytest -s, BENCH_OUT set);
# the infra's own timings (services up, each base build, in-image import gate) always.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
PY="${PYTHON_VENV:-$repo/.venv/bin/python}"
[[ -x "$PY" ]] || PY="$(command -v python3)"
export INFRA_STATE_DIR="${INFRA_STATE_DIR:-/tmp/glm53-test-infra}"
SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo -E"
mkdir -p out
export BENCH_OUT="$repo/out/bench.json"
trap '[[ "${INFRA_KEEP_UP:-0}" == 1 ]] || $SUDO bash "$here/services.sh" down || true' EXIT

now() { date +%s%N; }
since() { echo $(( ($(now) - $1) / 1000000 )); }  # ms
t=$(now); $SUDO bash "$here/services.sh" up >/dev/null; services_s=$(since $t)
declare -A secs
for b in amd64 wrong-version arm64; do
  t=$(now)
  if [[ $b == wrong-version ]]; then "$PY" "$here/build_base.py" --wrong-version >/dev/null
  else "$PY" "$here/build_base.py" --arch "$b" >/dev/null; fi
  secs[$b]=$(since $t)
done
declare -A gate
for a in amd64 arm64; do
  ref=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['reference'])" "$INFRA_STATE_DIR/base-$a.json")
  t=$(now)
  docker run --rm --platform "linux/$a" --entrypoint python3 "$ref" -c 'import vllm.v1.core.kv_cache_planning' >/dev/null
  gate[$a]=$(since $t)
done
benches=$(ls tests/bench*.py bench 2>/dev/null || true)
rc=0
if [[ -n "$benches" ]]; then "$PY" -m pytest -s $benches || rc=$?; fi
"$PY" - "$BENCH_OUT" <<PYEOF
import json, os, sys
path = sys.argv[1]
data = json.load(open(path)) if os.path.exists(path) else {}
data["infra"] = {"services_up_s": $services_s / 1000,
                 "base_build_s": {"amd64": ${secs[amd64]} / 1000, "wrong-version": ${secs[wrong-version]} / 1000,
                                  "arm64": ${secs[arm64]} / 1000},
                 "kv_cache_import_s": {"amd64": ${gate[amd64]} / 1000, "arm64_qemu": ${gate[arm64]} / 1000}}
json.dump(data, open(path, "w"), indent=2)
print(json.dumps(data["infra"], indent=2))
PYEOF
exit $rc
