"""Debian's cosign for the signing tests: the pinned .deb, checked, unpacked into the infra cache.

    python3 tests/infra/cosign.py      # prints the binary's path (fetches and unpacks it once)

Debian unstable's ``cosign`` package needs only libc6, so its binary runs from the unpacked
package (``dpkg-deb -x``) without installing anything on the host. The version and the .deb's
sha256 are pinned here and nowhere else; the .deb comes from the host's Debian mirror
(tests/infra/rootfs.py ``debian_mirror``) and is refused unless its sha256 is the pinned one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from rootfs import debian_mirror  # noqa: E402

VERSION = "3.1.1-2"
DEB = {"amd64": "d8622ebffce1d69197288fc030ff06a4c247af5507107f85c5a878870b686b23"}
ARCH = {"x86_64": "amd64"}
CACHE_DIR = Path(os.environ.get("INFRA_CACHE_DIR", str(HERE.parent.parent / ".cache" / "infra"))) / "cosign"


def deb_name(arch: str) -> str:
    return f"cosign_{VERSION}_{arch}.deb"


def binary_path(arch: str | None = None) -> Path:
    """Where the unpacked binary is (whether or not it is there yet)."""
    arch = arch or ARCH.get(os.uname().machine, os.uname().machine)
    return CACHE_DIR / f"{VERSION}-{arch}" / "usr" / "bin" / "cosign"


def ensure(arch: str | None = None) -> Path:
    """The cosign binary, fetched, checked and unpacked into the cache the first time."""
    arch = arch or ARCH.get(os.uname().machine, os.uname().machine)
    binary = binary_path(arch)
    if binary.is_file():
        return binary
    if arch not in DEB:
        raise SystemExit(f"[cosign] no pinned cosign .deb for {arch} (pinned: {', '.join(DEB)})")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    deb = CACHE_DIR / deb_name(arch)
    if not deb.is_file() or hashlib.sha256(deb.read_bytes()).hexdigest() != DEB[arch]:
        url = f"{debian_mirror().rstrip('/')}/pool/main/c/cosign/{deb_name(arch)}"
        with urllib.request.urlopen(url, timeout=300) as response:
            data = response.read()
        found = hashlib.sha256(data).hexdigest()
        if found != DEB[arch]:
            raise SystemExit(f"[cosign] {url}: sha256 {found}, pinned {DEB[arch]}; refused")
        deb.write_bytes(data)
    unpacked = Path(tempfile.mkdtemp(dir=CACHE_DIR, prefix="unpack-"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    try:
        unpacked.rename(binary.parents[2])
    except OSError:  # another run unpacked it meanwhile
        subprocess.run(["rm", "-rf", str(unpacked)], check=True)
    return binary


if __name__ == "__main__":
    print(ensure())
