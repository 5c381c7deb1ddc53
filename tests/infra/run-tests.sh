#!/usr/bin/env bash
# The whole test suite with its services (what `make test` runs):
#   services.sh up  ->  the synthetic bases built in the background (amd64 then wrong-version,
#   arm64, and the CPU serving base of the real-server tests), and beside them the second engine
#   (engine28.sh: Docker 28, containerd image store)  ->  $INFRA_SETUP while they build
#   (make test: the venv and the caches)  ->  pytest on every core
# The tests that need no engine run first (tests/parallel_groups.py); a test that needs a base
# waits for its build (tests/infra/harness.py wait_for_base) and fails with the build's log if it
# failed. services.sh down on exit (only what `up` started). Extra arguments go to pytest.
#   INFRA_SKIP_BASES=1   do not build the bases nor start the second engine (tests needing them skip,
#                        or fail when CI=true)
#   INFRA_KEEP_UP=1      leave the services running afterwards
#   TEST_WORKERS=N       pytest-xdist workers (default: one per core)
#   INFRA_SETUP=COMMAND  run (by bash) once the base builds have started; a failure ends the run
#   INFRA_PYTHON=PATH    the Python 3.11 the base builds run with (default: the venv's); they use
#                        only its standard library and pip, so they can start before the venv exists
source "$(dirname "${BASH_SOURCE[0]}")/preamble.sh"
jobs_dir="$INFRA_STATE_DIR/base-jobs"  # harness.BASE_JOBS_DIR: NAME.pending (pid), NAME.rc, NAME.log
# What this run keeps of its own timings (tests/infra/ci_phases.py reads it; make bench reports it):
# started/ended, bases/NAME.started/.ended/.rc/.log, pytest.started/.ended/.rc/.workers, junit.xml,
# timeline/WORKER.jsonl (each test's start and end, tests/conftest.py).
run_dir="$repo/out/test-run"
rm -rf "$run_dir"; mkdir -p "$run_dir/bases"
date +%s.%N >"$run_dir/started"

t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

job_pids=()
kill_tree() {  # PID and everything it started
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
cleanup() {
  local rc=$? pid
  for pid in "${job_pids[@]}"; do kill_tree "$pid"; done
  rm -f "$jobs_dir"/*.pending
  date +%s.%N >"$run_dir/ended"
  if [[ "${INFRA_KEEP_UP:-0}" != "1" ]]; then
    $SUDO bash "$here/engine28.sh" down || true
    $SUDO bash "$here/services.sh" down || true
  fi
  exit $rc
}
trap cleanup EXIT

# base_job NAME... -- COMMAND... ; COMMAND...: one background job building the named bases in order,
# one command per name; a failed build leaves the later ones unbuilt, with that said in their logs.
base_job() {
  local names=() name
  while [[ $1 != "--" ]]; do names+=("$1"); shift; done; shift
  for name in "${names[@]}"; do : >"$jobs_dir/$name.pending"; done
  (
    set +e
    failed=""
    for name in "${names[@]}"; do
      echo "$BASHPID" >"$jobs_dir/$name.pending"
      cmd=(); while [[ $# -gt 0 && $1 != ";" ]]; do cmd+=("$1"); shift; done; shift || true
      if [[ -n $failed ]]; then
        echo "not built: the $failed base failed" >"$jobs_dir/$name.log"; rc=1
      else
        date +%s.%N >"$run_dir/bases/$name.started"
        "${cmd[@]}" >"$jobs_dir/$name.log" 2>&1; rc=$?
        date +%s.%N >"$run_dir/bases/$name.ended"
        (( rc == 0 )) || failed=$name
      fi
      echo "$rc" >"$jobs_dir/$name.rc"
      cp "$jobs_dir/$name.log" "$jobs_dir/$name.rc" "$run_dir/bases/"
      rm -f "$jobs_dir/$name.pending"
    done
  ) &
  job_pids+=($!)
}

$SUDO bash "$here/services.sh" up
rm -rf "$jobs_dir"; mkdir -p "$jobs_dir"

if [[ "${INFRA_SKIP_BASES:-0}" != "1" ]]; then
  echo "[run-tests] building the synthetic bases in the background (logs in $jobs_dir)"
  # build_base.py is stdlib only; it runs pip as `$base_py -m pip`. The arm64 base
  # skips its own import check: the overlay build's gate step imports vLLM under qemu anyway.
  # The serving base goes first: the live-vLLM modules wait for it and then serve for the rest of
  # the run (tests/parallel_groups.py ENGINE_ORDER), so the other bases build at a lower priority.
  base_py="${INFRA_PYTHON:-$PY}"
  # The second engine: its rootfs from the cache (made once, ~2 min), unpacked and started in seconds.
  base_job engine28 -- $SUDO bash "$here/engine28.sh" up
  base_job serving -- $SUDO "$base_py" "$here/serving_base.py"
  base_job amd64 wrong-version -- nice -n 10 "$base_py" "$here/build_base.py" --arch amd64 ";" \
    nice -n 10 "$base_py" "$here/build_base.py" --wrong-version
  base_job arm64 -- nice -n 10 "$base_py" "$here/build_base.py" --arch arm64 --quick-check
fi

if [[ -n "${INFRA_SETUP:-}" ]]; then
  date +%s.%N >"$run_dir/setup.started"
  echo "[run-tests] set-up while the bases build: $INFRA_SETUP"
  bash -c "$INFRA_SETUP"
  date +%s.%N >"$run_dir/setup.ended"
  PY="${PYTHON_VENV:-$PY}"  # the set-up may have made the venv
fi

# One worker per core; tests/parallel_groups.py keeps the tests of one session build on one worker.
workers="${TEST_WORKERS:-$(nproc)}"
echo "$workers" >"$run_dir/pytest.workers"
date +%s.%N >"$run_dir/pytest.started"
rc=0
# The workers' timelines grow outside the checkout while the tests run (tests that check that a
# command wrote nothing snapshot out/), and are moved into the run's records after.
timeline="$INFRA_STATE_DIR/timeline"
rm -rf "$timeline"; mkdir -p "$timeline"
TEST_TIMELINE="$timeline" "$PY" -m pytest tests --durations=25 -n "$workers" --no-loadscope-reorder --junitxml="$run_dir/junit.xml" "$@" || rc=$?
date +%s.%N >"$run_dir/pytest.ended"
mv "$timeline" "$run_dir/timeline"
echo "$rc" >"$run_dir/pytest.rc"
for name in amd64 wrong-version arm64 serving engine28; do
  [[ -f "$jobs_dir/$name.log" ]] || continue
  grep -hE 'done in|built in|pushed .* in [0-9]+ s|up to date|gate \(|\] up in ' "$jobs_dir/$name.log" | sed "s/^/[run-tests] base $name: /" || true
  [[ -f "$jobs_dir/$name.pending" ]] && echo "[run-tests] base $name: still building when the tests ended"
  if [[ -f "$jobs_dir/$name.rc" && $(cat "$jobs_dir/$name.rc") != 0 ]]; then
    echo "[run-tests] base $name failed (exit $(cat "$jobs_dir/$name.rc")):"; tail -n 40 "$jobs_dir/$name.log"; rc=1
  fi
done
date +%s.%N >"$run_dir/ended"
"$PY" "$here/ci_phases.py" "$run_dir" --out "$repo/out/ci-phases.json" || true
echo "[run-tests] pytest exit $rc after $(elapsed)"
exit $rc
