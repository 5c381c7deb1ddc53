#!/usr/bin/env bash
# Test services for the CI / local test runs:
#   * a Docker daemon (started here only when none is reachable),
#   * qemu aarch64 binfmt registration (for linux/arm64 containers on x86-64),
#   * a Distribution registry on 127.0.0.1:5000 with htpasswd (bcrypt) auth.
#
# usage: services.sh up|down|status|registry-stop|registry-start|env
#   registry-stop/-start: the registry alone, same config, storage and password
#   (for registry-down tests).
#
# State lives in $INFRA_STATE_DIR (default /tmp/glm53-test-infra):
#   credentials.json   {"url","username","password"}  mode 0600 (never printed)
#   dockerd.pid/.log   only when this script started dockerd
#   registry/…         config, htpasswd, storage, pid, log (gc.log: what `up` collected)
# `down` stops only what `up` started. A new registry gets fresh credentials and storage that
# holds only the synthetic bases' repositories of the last one and those the latest runs pushed
# to (registry_storage.py).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE_DIR="${INFRA_STATE_DIR:-/tmp/glm53-test-infra}"
REGISTRY_ADDR="${INFRA_REGISTRY_ADDR:-127.0.0.1:5000}"
REGISTRY_USER="ci"
REG_DIR="$STATE_DIR/registry"
CRED_FILE="$STATE_DIR/credentials.json"
DOCKERD_PID_FILE="$STATE_DIR/dockerd.pid"
DOCKERD_LOG="$STATE_DIR/dockerd.log"
REG_PID_FILE="$REG_DIR/registry.pid"
REG_LOG="$REG_DIR/registry.log"

log() { echo "[services] $*" >&2; }
die() { echo "[services] ERROR: $*" >&2; exit 1; }

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }
read_pid() { [[ -f "$1" ]] && cat "$1" || true; }

docker_ok() { docker info >/dev/null 2>&1; }

wait_for() { # wait_for SECONDS CMD...
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@"; do
    (( $(date +%s) >= deadline )) && return 1
    sleep 0.5
  done
}

need_root() { [[ $(id -u) -eq 0 ]] || die "$1 needs root"; }

# ---------------------------------------------------------------- binfmt
ensure_binfmt() {
  if [[ "$(uname -m)" == "aarch64" ]]; then return 0; fi
  local bm=/proc/sys/fs/binfmt_misc
  if [[ ! -e "$bm/register" ]]; then
    need_root "mounting binfmt_misc"
    mount -t binfmt_misc binfmt_misc "$bm" || die "cannot mount binfmt_misc"
  fi
  if [[ ! -e "$bm/qemu-aarch64" ]] || ! grep -q '^enabled' "$bm/qemu-aarch64"; then
    if command -v update-binfmts >/dev/null 2>&1; then
      update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
    fi
  fi
  if [[ ! -e "$bm/qemu-aarch64" ]]; then
    # Register by hand (fix-binary flag so it works inside containers).
    local qemu; qemu="$(command -v qemu-aarch64-static || true)"
    [[ -n "$qemu" ]] || die "qemu-aarch64-static not installed (apt-get install qemu-user-static)"
    printf '%s' ':qemu-aarch64:M::\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:'"$qemu"':F' > "$bm/register" \
      || die "cannot register qemu-aarch64 binfmt"
  fi
  grep -q '^enabled' "$bm/qemu-aarch64" || die "qemu-aarch64 binfmt not enabled"
  grep -q '^flags:.*F' "$bm/qemu-aarch64" || log "warning: qemu-aarch64 binfmt lacks the F flag; arm64 containers may fail"
}

# ---------------------------------------------------------------- dockerd
start_dockerd() {
  if docker_ok; then
    log "docker daemon already reachable"
    return 0
  fi
  local pid; pid="$(read_pid "$DOCKERD_PID_FILE")"
  if pid_alive "$pid"; then
    log "dockerd (pid $pid) started earlier is not answering yet; waiting"
  else
    need_root "starting dockerd"
    command -v dockerd >/dev/null || die "dockerd not installed (apt-get install docker.io)"
    [[ -S /var/run/docker.sock ]] && ! pgrep -x dockerd >/dev/null && rm -f /var/run/docker.sock
    log "starting dockerd (log: $DOCKERD_LOG)"
    # containerd is spawned by dockerd itself when none is running.
    setsid dockerd >>"$DOCKERD_LOG" 2>&1 < /dev/null &
    echo $! > "$DOCKERD_PID_FILE"
  fi
  if ! wait_for 90 docker_ok; then
    tail -n 30 "$DOCKERD_LOG" >&2 || true
    die "docker daemon did not come up within 90 s"
  fi
  log "dockerd up"
}

stop_dockerd() {
  local pid; pid="$(read_pid "$DOCKERD_PID_FILE")"
  if pid_alive "$pid"; then
    log "stopping dockerd (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_for 60 bash -c "! kill -0 $pid 2>/dev/null"; then
      log "dockerd did not stop in 60 s; killing"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$DOCKERD_PID_FILE"
}

# ---------------------------------------------------------------- registry
registry_bin() {
  local b
  for b in "${INFRA_REGISTRY_BIN:-}" /usr/bin/docker-registry "$(command -v docker-registry || true)" "$(command -v registry || true)"; do
    [[ -n "$b" && -x "$b" ]] && { echo "$b"; return 0; }
  done
  die "docker-registry not installed (apt-get install docker-registry)"
}

registry_ping() { # any HTTP answer from /v2/ (401 expected with auth)
  local code
  code="$(curl -s -o /dev/null -w '%{http_code}' "http://$REGISTRY_ADDR/v2/" 2>/dev/null || true)"
  [[ "$code" == "401" || "$code" == "200" ]]
}

py() { command -v python3 >/dev/null && python3 "$@"; }

write_credentials() {
  # A fresh random password per `up`; written 0600, never echoed.
  command -v htpasswd >/dev/null || die "htpasswd not installed (apt-get install apache2-utils)"
  mkdir -p "$REG_DIR"
  local pw
  pw="$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32)"
  [[ ${#pw} -ge 24 ]] || die "could not generate a password"
  (umask 077
   # htpasswd -i reads the password from stdin, so it never shows in ps.
   printf '%s' "$pw" | htpasswd -iBn "$REGISTRY_USER" > "$REG_DIR/htpasswd.tmp" 2>/dev/null \
     || die "htpasswd failed"
   mv "$REG_DIR/htpasswd.tmp" "$REG_DIR/htpasswd"
   PW="$pw" URL="$REGISTRY_ADDR" USER_="$REGISTRY_USER" python3 - "$CRED_FILE" <<'PYEOF'
import json, os, sys
path = sys.argv[1]
tmp = path + ".tmp"
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as f:
    json.dump({"url": os.environ["URL"], "username": os.environ["USER_"],
               "password": os.environ["PW"]}, f)
os.chmod(tmp, 0o600)
os.replace(tmp, path)
PYEOF
  )
  chmod 600 "$CRED_FILE"
}

write_registry_config() {
  cat > "$REG_DIR/config.yml" <<YAML
version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $REG_DIR/storage
  delete:
    enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: $REGISTRY_ADDR
  secret: $(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
auth:
  htpasswd:
    realm: glm53-ci-registry
    path: $REG_DIR/htpasswd
YAML
}

# The last registry's storage less every repository but the synthetic bases' and the latest runs'
# (registry_storage.py), and less the blobs only those held (the registry's own offline
# garbage-collect); on any failure, empty storage.
keep_base_repositories() {
  mkdir -p "$REG_DIR/storage"
  local said
  if [[ ! -d "$REG_DIR/storage/docker/registry/v2/repositories" ]]; then
    log "registry storage: empty (no earlier registry on this machine)"
    return 0
  fi
  if said="$(python3 "$HERE/registry_storage.py" "$REG_DIR/storage" "$STATE_DIR" "$REGISTRY_ADDR")" \
    && "$(registry_bin)" garbage-collect --delete-untagged "$REG_DIR/config.yml" >"$REG_DIR/gc.log" 2>&1; then
    log "registry storage: $said"
  else
    log "registry storage: could not keep the bases' repositories (see $REG_DIR/gc.log); starting empty"
    rm -rf "$REG_DIR/storage"
    mkdir -p "$REG_DIR/storage"
  fi
}

start_registry() {
  local pid; pid="$(read_pid "$REG_PID_FILE")"
  if pid_alive "$pid" && registry_ping; then
    log "registry already running (pid $pid) on $REGISTRY_ADDR"
    return 0
  fi
  if registry_ping; then
    die "something else already answers on $REGISTRY_ADDR (not started by this script)"
  fi
  [[ -f "$REG_DIR/config.yml" && -f "$REG_DIR/htpasswd" && -f "$CRED_FILE" ]] \
    || die "registry not configured; run: services.sh up"
  local bin; bin="$(registry_bin)"
  setsid "$bin" serve "$REG_DIR/config.yml" >>"$REG_LOG" 2>&1 < /dev/null &
  echo $! > "$REG_PID_FILE"
  if ! wait_for 30 registry_ping; then
    tail -n 20 "$REG_LOG" >&2 || true
    die "registry did not answer on $REGISTRY_ADDR within 30 s"
  fi
  log "registry up on $REGISTRY_ADDR (pid $(cat "$REG_PID_FILE"))"
}

stop_registry() {
  local pid; pid="$(read_pid "$REG_PID_FILE")"
  if pid_alive "$pid"; then
    log "stopping registry (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    wait_for 20 bash -c "! kill -0 $pid 2>/dev/null" || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$REG_PID_FILE"
}

# ---------------------------------------------------------------- commands
cmd_up() {
  mkdir -p "$STATE_DIR"; chmod 700 "$STATE_DIR"
  ensure_binfmt
  start_dockerd
  local pid; pid="$(read_pid "$REG_PID_FILE")"
  if ! { pid_alive "$pid" && registry_ping; }; then
    stop_registry
    # Fresh credentials for every new registry; of the storage, only the bases' and the latest runs' repositories stay.
    write_credentials
    write_registry_config
    keep_base_repositories
    start_registry
  else
    log "registry already running (pid $pid) on $REGISTRY_ADDR"
  fi
  cmd_status
}

cmd_down() {
  stop_registry
  stop_dockerd
  log "down"
}

cmd_status() {
  local rc=0 pid
  if docker_ok; then
    pid="$(read_pid "$DOCKERD_PID_FILE")"
    if pid_alive "$pid"; then echo "dockerd: up (started by services.sh, pid $pid)"
    else echo "dockerd: up (not started by services.sh)"; fi
  else echo "dockerd: down"; rc=1; fi
  if [[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] && grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
    echo "binfmt qemu-aarch64: enabled"
  elif [[ "$(uname -m)" != "aarch64" ]]; then echo "binfmt qemu-aarch64: missing"; rc=1; fi
  pid="$(read_pid "$REG_PID_FILE")"
  if pid_alive "$pid" && registry_ping; then echo "registry: up on $REGISTRY_ADDR (pid $pid)"
  else echo "registry: down"; rc=1; fi
  echo "state dir: $STATE_DIR"
  [[ -f "$CRED_FILE" ]] && echo "credentials: $CRED_FILE (mode $(stat -c %a "$CRED_FILE"))"
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  registry-stop) stop_registry ;;
  registry-start) start_registry ;;
  env) echo "INFRA_STATE_DIR=$STATE_DIR"; echo "INFRA_REGISTRY=$REGISTRY_ADDR"; echo "INFRA_CREDENTIALS=$CRED_FILE" ;;
  *) echo "usage: $0 up|down|status|registry-stop|registry-start|env" >&2; exit 2 ;;
esac
