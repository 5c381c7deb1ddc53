#!/usr/bin/env python3
"""The root filesystem the second test engine runs from: Docker 28 with the containerd image store.

    engine_rootfs.py          print the path of the rootfs tarball, building it if needed
    engine_rootfs.py --name   print the tarball's file name (its key), building nothing

Debian unstable's `docker.io` (28.5), `containerd` (2.1), `docker-buildx` and `docker-compose`
(Compose v2), installed by `mmdebstrap --variant=minbase` into a tarball cached in
$INFRA_CACHE_DIR/rootfs under a key of its inputs (suite, mirror, packages, the way it is made).
engine28.sh unpacks it and runs its dockerd chrooted, in a mount namespace of its own; nothing
of it is installed on the host. The tarball holds the versions unstable had when it was made:
remove it to take newer ones (the smoke test says which engine it runs).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import harness  # tests/infra, this script's directory
import rootfs

SUITE = "unstable"
# The engine, its containerd and runc, the CLI and its BuildKit and Compose v2 plugins.
PACKAGES = ("docker.io", "docker-cli", "containerd", "runc", "docker-buildx", "docker-compose", "ca-certificates")
# Unstable's Release file expires within days; a mirror a few weeks behind the clock is still what we want.
APT_OPTIONS = ('Acquire::Check-Valid-Until "false"',)
# Bump when the way the rootfs is made changes.
RECIPE_VERSION = 1


def input_key() -> str:
    inputs = [RECIPE_VERSION, SUITE, rootfs.host_arch(), rootfs.debian_mirror(), PACKAGES, APT_OPTIONS]
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:16]


def tar_name() -> str:
    """The tarball's file name: what it is made of, by its key."""
    return f"engine28-{SUITE}-{rootfs.host_arch()}-{input_key()}.tar"


def engine_rootfs_tar() -> Path:
    """The tarball: from the cache, else made (and then cached)."""
    out = harness.CACHE_DIR / "rootfs" / tar_name()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            rootfs.log(f"engine: cached {out}")
            return out
        t0 = time.time()
        with tempfile.TemporaryDirectory(prefix="engine28-", dir=out.parent) as tmp:
            part = Path(tmp) / out.name
            done = rootfs.run(
                [
                    "mmdebstrap",
                    "--quiet",
                    "--variant=minbase",
                    *(f"--aptopt={option}" for option in APT_OPTIONS),
                    *(f"--include={name}" for name in PACKAGES),
                    SUITE,
                    part,
                    rootfs.debian_mirror(),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
                raise SystemExit(f"[rootfs] engine: mmdebstrap failed (exit {done.returncode}):\n{tail}")
            part.rename(out)
        rootfs.log(f"engine: rootfs built in {time.time() - t0:.0f} s ({out.stat().st_size >> 20} MiB): {out}")
        return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--name"]:
        print(tar_name())
    elif len(sys.argv) > 1:
        raise SystemExit(__doc__)
    else:
        print(engine_rootfs_tar())
