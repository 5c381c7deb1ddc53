#!/bin/sh
# Give every file a build step changed the same time, so the layer's bytes depend
# on the inputs and not on when the build ran. Usage: normalise-mtimes.sh STAMP EPOCH
set -eu
stamp=$1
epoch=$2
rm -rf /root/.cache/vllm /root/.triton /tmp/torchinductor_root 2>/dev/null || true
find / -xdev \( -path /proc -o -path /sys -o -path /dev \) -prune -o \
     -newer "$stamp" -print0 2>/dev/null | xargs -0 -r touch -h -d "@$epoch" 2>/dev/null || true
rm -f "$stamp"
touch -h -d "@$epoch" /tmp
