#!/usr/bin/env bash
# The second test engine: Docker 28 with the containerd image store, beside services.sh's engine.
#
# usage: engine28.sh up|down|status|env
#
# Its rootfs (Debian unstable's docker.io, containerd, runc, buildx and Compose v2) is the tarball
# engine_rootfs.py caches; `up` unpacks it into $INFRA_STATE_DIR/engine28/root and runs its dockerd
# chrooted there, in a mount namespace of its own (unshare), as root. Its own data root, exec root,
# containerd (started by that dockerd), pid file and socket ($INFRA_STATE_DIR/engine28/docker.sock);
# `"features": {"containerd-snapshotter": true}`. Beside the first engine in the host's network
# namespace it touches neither docker0 nor iptables: its default bridge is a bridge of its own
# (BRIDGE, BRIDGE_CIDR), iptables off (published ports go through docker-proxy); the networks it makes
# take subnets no host route uses. Never `"bridge": "none"` nor `default-address-pools`: with either,
# dockerd deletes the link named docker0 at start (the first engine's bridge); `up` checks docker0
# is still there afterwards. /tmp is mounted at the same path inside, so a bind mount of
# a test's temporary directory names the same files. `down` stops what `up` started and removes the
# bridge; the unpacked rootfs stays for the next `up`, and so do the images of the synthetic bases'
# repositories after a clean stop (all else the engine holds is removed at that `up`).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE_DIR="${INFRA_STATE_DIR:-$(bash "$here/services.sh" env | sed -n 's/^INFRA_STATE_DIR=//p')}"
E="$STATE_DIR/engine28"   # harness.ENGINE28_DIR
ROOT="$E/root"
SOCK="$E/docker.sock"
PID_FILE="$E/dockerd.pid"
LOG="$E/dockerd.log"
BRIDGE="glm53-e28br0"
BRIDGE_CIDR="10.213.255.1/24"

log() { echo "[engine28] $*" >&2; }
die() { echo "[engine28] ERROR: $*" >&2; exit 1; }
pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }
read_pid() { [[ -f "$1" ]] && cat "$1" || true; }
ping_ok() { [[ -S "$SOCK" ]] && [[ "$(curl -s --max-time 5 --unix-socket "$SOCK" http://engine28/_ping 2>/dev/null)" == "OK" ]]; }

wait_for() { # wait_for SECONDS CMD...
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@"; do
    (( $(date +%s) >= deadline )) && return 1
    sleep 0.5
  done
}

unpack() {
  # The tarball's name is its key: a rootfs unpacked from it needs no tarball (none is made).
  local name; name="$(python3 "$here/engine_rootfs.py" --name)"
  if [[ -f "$E/root.from" && "$(cat "$E/root.from")" == "$name" && -x "$ROOT/usr/sbin/dockerd" ]]; then
    log "rootfs unpacked already ($name)"
    return 0
  fi
  local tar; tar="$(python3 "$here/engine_rootfs.py")"
  rm -rf "$ROOT" "$E/root.from"
  mkdir -p "$ROOT"
  tar --numeric-owner -C "$ROOT" -xf "$tar"
  basename "$tar" >"$E/root.from"
  log "rootfs unpacked from $tar"
}

write_config() {
  mkdir -p "$ROOT/etc/docker"
  cat >"$ROOT/etc/docker/daemon.json" <<JSON
{
  "features": {"containerd-snapshotter": true},
  "hosts": ["unix://$SOCK"],
  "data-root": "/var/lib/docker",
  "exec-root": "/run/docker",
  "pidfile": "/run/docker.pid",
  "bridge": "$BRIDGE",
  "iptables": false,
  "ip6tables": false,
  "cgroup-parent": "glm53-engine28"
}
JSON
}

ensure_bridge() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
}

cmd_up() {
  [[ $(id -u) -eq 0 ]] || die "engine28.sh up needs root"
  mkdir -p "$E"
  if pid_alive "$(read_pid "$PID_FILE")" && ping_ok; then
    log "up already (pid $(read_pid "$PID_FILE")) at unix://$SOCK"
    return 0
  fi
  local t0; t0=$(date +%s)
  unpack
  # A data root the last `down` stopped cleanly is kept, and emptied of all but the synthetic bases once
  # the engine answers (keep_only_the_bases): the bases need no pull (some 100 CPU-seconds of its
  # containerd). Any other is not this run's: an engine killed mid-write can leave its content store
  # disagreeing with its images, so that pushes fail "content digest not found". It is moved aside at
  # once and removed in the background (some 150,000 files), with whatever an earlier `up` left there.
  local kept=""
  if [[ -f "$E/stopped-cleanly" && -d "$ROOT/var/lib/docker" ]]; then
    kept=1
  else
    local trash="$E/old-data.$$"
    mkdir -p "$trash"
    for old in "$ROOT/var/lib/docker" "$ROOT/var/lib/containerd"; do
      if [[ -e "$old" ]]; then mv "$old" "$trash/"; fi
    done
  fi
  rm -f "$E/stopped-cleanly"
  (nice -n 19 rm -rf "$E"/old-data.* </dev/null >/dev/null 2>&1 &)
  write_config
  ensure_bridge
  rm -f "$SOCK"
  local docker0; docker0="$(ip -o -4 addr show dev docker0 2>/dev/null | awk '{print $4}' | head -n1)"
  # In the new mount namespace: the rootfs a mount of its own (dockerd looks its data root's mount
  # up), the kernel's file systems, a fresh /run, /tmp and this directory at their own paths.
  setsid unshare --mount --propagation private bash -euc '
    root=$1; state=$2
    mount --bind "$root" "$root"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --rbind /dev "$root/dev"
    mount -t tmpfs tmpfs "$root/run"
    mount --bind /tmp "$root/tmp"
    mkdir -p "$root$state"
    mount --bind "$state" "$root$state"
    exec chroot "$root" /usr/sbin/dockerd
  ' engine28 "$ROOT" "$E" >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
  if ! wait_for 60 ping_ok; then
    tail -n 30 "$LOG" >&2 || true
    die "dockerd did not answer at $SOCK within 60 s"
  fi
  if [[ -n "$docker0" ]] && ! ip link show docker0 >/dev/null 2>&1; then
    ip link add docker0 type bridge && ip addr add "$docker0" dev docker0 && ip link set docker0 up
    cmd_down
    die "starting it removed the first engine's docker0 (put back, $docker0); see $LOG"
  fi
  if [[ -n "$kept" ]]; then keep_only_the_bases; fi
  log "up in $(( $(date +%s) - t0 )) s: $(DOCKER_HOST="unix://$SOCK" docker version --format 'Docker {{.Server.Version}}, API {{.Server.APIVersion}}' 2>/dev/null) at unix://$SOCK"
}

# Every container, volume, network and build-cache entry removed, and every image but those of the
# synthetic bases' repositories (those the base-*.json records name, registry_storage.py --recorded:
# the bases, and what the tests put there, such as the multi-platform base's per-platform images, whose
# layers are the bases'): what a new engine holds once the tests have pulled them.
keep_only_the_bases() {
  local -a d=(docker -H "unix://$SOCK")
  local repositories repository
  repositories="$(python3 "$here/registry_storage.py" --recorded "$STATE_DIR")"
  "${d[@]}" ps -aq | xargs -r "${d[@]}" rm -f >/dev/null
  # Every image the engine's containerd holds, not only those `docker image ls` shows: the classic
  # builder's step images too (moby-dangling@…, its build cache), and images held incomplete (layers
  # unpacked, their blobs gone: a pull of one fetches nothing, and what is built FROM it has no
  # platform), which are removed even in a kept repository.
  local -a ctr=(nsenter --target "$(read_pid "$PID_FILE")" --mount --root
    ctr -a /run/docker/containerd/containerd.sock -n moby)
  local name last incomplete
  incomplete="$("${ctr[@]}" images check | awk 'NR > 1 && $4 == "incomplete" {print $1}')"
  while read -r name; do
    repository="${name%%@*}"
    last="${repository##*/}"
    if [[ "$last" == *:* ]]; then repository="${repository%:*}"; fi
    if ! grep -qxF -- "$repository" <<<"$repositories" || grep -qxF -- "$name" <<<"$incomplete"; then
      "${ctr[@]}" images rm "$name" >/dev/null || log "could not remove $name"
    fi
  done < <("${ctr[@]}" images ls -q)
  "${d[@]}" builder prune -af >/dev/null 2>&1 || log "could not prune its build cache"
  "${d[@]}" volume prune -af >/dev/null || log "could not prune its volumes"
  "${d[@]}" network prune -f >/dev/null || log "could not prune its networks"
  log "kept its data root: $("${d[@]}" image ls --format '{{.Repository}}:{{.Tag}}' | sort | paste -sd ' ')"
}

# The processes whose root is the engine's rootfs: its dockerd, containerd, shims and containers.
engine_processes() {
  local proc
  for proc in /proc/[0-9]*; do
    [[ "$(readlink "$proc/root" 2>/dev/null)" == "$ROOT"* ]] && echo "${proc#/proc/}"
  done
  return 0
}

cmd_down() {
  local pid clean=""; pid="$(read_pid "$PID_FILE")"
  if pid_alive "$pid"; then
    log "stopping dockerd (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    if wait_for 60 bash -c "! kill -0 $pid 2>/dev/null"; then clean=1; else kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  local left; left="$(engine_processes)"
  if [[ -n "$left" ]]; then
    clean=""
    log "stopping what it left: $(echo $left)"
    kill -KILL $left 2>/dev/null || true
  fi
  # The next `up` keeps the data root only after this: dockerd ended on its own and left nothing running.
  if [[ -n "$clean" ]]; then touch "$E/stopped-cleanly"; fi
  rm -f "$PID_FILE" "$SOCK"
  if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link delete "$BRIDGE"; fi
  log "down"
}

cmd_status() {
  if pid_alive "$(read_pid "$PID_FILE")" && ping_ok; then
    echo "engine28: up (pid $(read_pid "$PID_FILE")) at unix://$SOCK"
  else
    echo "engine28: down"
    return 1
  fi
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) echo "DOCKER_HOST=unix://$SOCK" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
