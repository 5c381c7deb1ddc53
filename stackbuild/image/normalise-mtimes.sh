#!/bin/sh
# Give every file a build step changed the same time, so the layer's bytes depend
# on the inputs and not on when the build ran. Usage: normalise-mtimes.sh STEP_DIR EPOCH
# STEP_DIR (under /tmp) is the step's own directory: its start stamp `STEP_DIR/stamp` and
# the caches the step's Python wrote (Dockerfile.j2 points TMPDIR, XDG_CACHE_HOME and
# vLLM's, Triton's and torch inductor's caches there). It is deleted whole; nothing
# else is, so a base that ships such caches keeps them.
set -eu
step=$1
epoch=$2
find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path "$step" \) -prune -o \
     -newer "$step/stamp" -print0 2>/dev/null | xargs -0 -r touch -h -d "@$epoch" 2>/dev/null || true
rm -rf "$step"
touch -h -d "@$epoch" /tmp
