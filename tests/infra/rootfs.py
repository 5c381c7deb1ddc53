#!/usr/bin/env python3
"""One Debian bookworm minbase root filesystem per architecture, shared by every synthetic base.

    rootfs.py --arch amd64|arm64     print the path of the rootfs tarball, building it if needed

The tarball is cached in $INFRA_CACHE_DIR/rootfs under a key of its inputs (suite, architecture,
mirror, packages, the way it is made), so the amd64 base and the CPU serving base start from the
same file, and a second run on the machine builds none. The packages are the union of what the
bases need (PACKAGES).

The machine's own architecture is made by `mmdebstrap --variant=minbase`: apt resolves and
downloads the packages, dpkg installs and configures them. A foreign one is not configured under
qemu (every maintainer script emulated: many minutes): `mmdebstrap --variant=extract` unpacks the
same package set (priority required, apt, PACKAGES), and the configuration a container of it
reads is written on the host (FOREIGN_CONFIGURATION): the accounts, the alternatives, the CA
bundle, the standard library's bytecode; the dynamic linker's cache is the one program run
under emulation.

Each step prints how long it took.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness  # tests/infra, this script's directory

CACHE_DIR = harness.CACHE_DIR

SUITE = "bookworm"
# python3 (Debian's 3.11) for vLLM's Python tree; ca-certificates; the libraries vLLM's CPU
# kernels link (libnuma1) and its CPU worker preloads (libgomp1, libtcmalloc-minimal4).
PACKAGES = ("python3", "python3-minimal", "ca-certificates", "libnuma1", "libgomp1", "libtcmalloc-minimal4")
# What `--variant=minbase` installs besides PACKAGES: the foreign rootfs extracts the same set.
MINBASE = ("?priority(required)", "apt")
# Bump when the way a rootfs is made changes.
RECIPE_VERSION = 3
# Removed from every rootfs: apt's lists and caches, docs, man pages, locales, logs.
SLIMMED = (
    "var/lib/apt/lists",
    "var/cache/apt",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/log",
)
# The alternatives minbase's maintainer scripts set (update-alternatives): link -> target.
ALTERNATIVES = {
    "usr/bin/awk": "/usr/bin/mawk",
    "usr/bin/nawk": "/usr/bin/mawk",
    "usr/bin/pager": "/bin/more",
    "usr/sbin/rmt": "/usr/sbin/rmt-tar",
    "usr/bin/which": "/usr/bin/which.debianutils",
}
FOREIGN_CONFIGURATION = (
    "/etc/passwd and /etc/group from base-passwd's masters",
    "the alternatives (" + ", ".join(Path(link).name for link in ALTERNATIVES) + ")",
    "/etc/ssl/certs/ca-certificates.crt from every certificate ca-certificates ships",
    "the standard library byte-compiled by the host's CPython 3.11",
    "ldconfig, under emulation",
)
ARCH_OF_MACHINE = {"x86_64": "amd64", "aarch64": "arm64"}
MACHINE_OF_ARCH = {arch: machine for machine, arch in ARCH_OF_MACHINE.items()}


def log(msg: str) -> None:
    print(f"[rootfs] {msg}", file=sys.stderr, flush=True)


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    log("$ " + " ".join(str(c) for c in cmd))
    kw.setdefault("check", True)
    return subprocess.run([str(c) for c in cmd], **kw)


def debian_mirror() -> str:
    """The host's Debian mirror (deb822 sources first, then sources.list), else deb.debian.org."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            m = re.match(r"\s*URIs:\s*(\S+)", line)
            if m and "security" not in m.group(1):
                return m.group(1)
    path = Path("/etc/apt/sources.list")
    if path.exists():
        for line in path.read_text().splitlines():
            m = re.match(r"\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\b", line)
            if m:
                return m.group(1)
    return "http://deb.debian.org/debian"


def host_arch() -> str:
    return ARCH_OF_MACHINE.get(platform.machine(), platform.machine())


def input_key(arch: str) -> str:
    """What a rootfs is made of and how: equal keys, equal rootfs."""
    native = arch == host_arch()
    inputs = [RECIPE_VERSION, SUITE, arch, debian_mirror(), PACKAGES, MINBASE, SLIMMED, native]
    if not native:
        inputs += [ALTERNATIVES, FOREIGN_CONFIGURATION]
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:16]


def rootfs_tar(arch: str) -> Path:
    """The rootfs tarball for arch: from the cache, else built (and then cached)."""
    if arch not in MACHINE_OF_ARCH:
        raise SystemExit(f"[rootfs] no rootfs for architecture {arch!r}: one of {', '.join(sorted(MACHINE_OF_ARCH))}")
    out = CACHE_DIR / "rootfs" / f"{SUITE}-{arch}-{input_key(arch)}.tar"
    out.parent.mkdir(parents=True, exist_ok=True)
    # Two bases built at once may both need it: one builds, the other waits and takes it.
    with open(out.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            log(f"{arch}: cached {out}")
            return out
        return _build(arch, out)


def _build(arch: str, out: Path) -> Path:
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix=f"rootfs-{arch}-", dir=out.parent) as tmp:
        root = Path(tmp) / "root"
        if arch == host_arch():
            mmdebstrap(arch, root, variant="minbase", include=PACKAGES)
        else:
            mmdebstrap(arch, root, variant="extract", include=MINBASE + PACKAGES)
            configure_foreign(root, arch)
        slim(root)
        machine = subprocess.run(["chroot", root, "uname", "-m"], capture_output=True, text=True)
        if machine.stdout.strip() != MACHINE_OF_ARCH[arch]:
            raise SystemExit(
                f"[rootfs] {arch}: chroot uname -m says {machine.stdout.strip() or machine.stderr.strip()!r}"
            )
        step = time.time()
        part = out.with_suffix(".part")
        run(["tar", "--numeric-owner", "--xattrs", "-C", root, "-cf", part, "."])
        part.rename(out)
        log(f"{arch}: tar written in {time.time() - step:.0f} s")
    log(f"{arch}: rootfs built in {time.time() - t0:.0f} s ({out.stat().st_size >> 20} MiB): {out}")
    return out


def mmdebstrap(arch: str, root: Path, *, variant: str, include: tuple[str, ...]) -> None:
    t0 = time.time()
    hooks = [] if variant != "extract" else ["--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr"]
    done = run(
        [
            "mmdebstrap",
            "--quiet",
            f"--variant={variant}",
            f"--arch={arch}",
            *hooks,
            # One --include per entry: apt patterns (priority) may hold commas.
            *(f"--include={name}" for name in include),
            SUITE,
            root,
            debian_mirror(),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise SystemExit(f"[rootfs] {arch}: mmdebstrap failed (exit {done.returncode}):\n{tail}")
    log(f"{arch}: mmdebstrap --variant={variant} done in {time.time() - t0:.0f} s")


def configure_foreign(root: Path, arch: str) -> None:
    """What minbase's configuration leaves that a container reads, written without emulation."""
    t0 = time.time()
    masters = root / "usr/share/base-passwd"
    for name in ("passwd", "group"):
        shutil.copyfile(masters / f"{name}.master", root / "etc" / name)
    for link, target in ALTERNATIVES.items():
        alternative = root / "etc/alternatives" / Path(link).name
        alternative.parent.mkdir(parents=True, exist_ok=True)
        if not (root / target.lstrip("/")).exists():
            raise SystemExit(f"[rootfs] {arch}: alternative {link} -> {target}: {target} is not in the rootfs")
        alternative.unlink(missing_ok=True)
        alternative.symlink_to(target)
        (root / link).unlink(missing_ok=True)
        (root / link).symlink_to(f"/etc/alternatives/{alternative.name}")
    shipped = sorted((root / "usr/share/ca-certificates").rglob("*.crt"))
    bundle = root / "etc/ssl/certs/ca-certificates.crt"
    bundle.parent.mkdir(parents=True, exist_ok=True)
    bundle.write_text("".join(cert.read_text().rstrip("\n") + "\n" for cert in shipped))
    (root / "etc/ca-certificates.conf").write_text(
        "".join(str(cert.relative_to(root / "usr/share/ca-certificates")) + "\n" for cert in shipped)
    )
    stdlib = root / "usr/lib/python3.11"
    if sys.version_info[:2] == (3, 11):
        run(
            [sys.executable, "-m", "compileall", "-q", "-j", "0", "-s", root, "-p", "/", "-x", r"/tests?/", stdlib],
            stdout=subprocess.DEVNULL,
            check=False,
        )
    else:
        log(f"{arch}: the host's Python is not 3.11: the standard library is left without bytecode")
    run(["chroot", root, "/sbin/ldconfig"])
    log(f"{arch}: configured on the host in {time.time() - t0:.0f} s ({len(shipped)} CA certificates)")


def slim(root: Path) -> None:
    for sub in SLIMMED:
        path = root / sub
        if path.exists():
            shutil.rmtree(path)
            path.mkdir(parents=True)
    for entry in (root / "dev").iterdir():  # the engine provides /dev
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", required=True, choices=sorted(MACHINE_OF_ARCH))
    print(rootfs_tar(parser.parse_args().arch))


if __name__ == "__main__":
    main()
