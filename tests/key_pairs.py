"""Key pairs the tools themselves make, for the tests of what reads public keys: cosign's own
(`cosign generate-key-pair`: ECDSA P-256, the private key encrypted) and OpenSSL's (`openssl genpkey`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def cosign_pair(cosign: Path, directory: Path) -> tuple[Path, Path]:
    """(cosign.key, cosign.pub) made by cosign in ``directory``."""
    made = subprocess.run(
        [str(cosign), "generate-key-pair"],
        cwd=directory,
        capture_output=True,
        text=True,
        env={**os.environ, "COSIGN_PASSWORD": "unit"},
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    return directory / "cosign.key", directory / "cosign.pub"


def openssl_pair(directory: Path, name: str, *genpkey: str) -> tuple[Path, Path]:
    """(NAME.key, NAME.pub): ``openssl genpkey GENPKEY`` and its public key in PEM."""
    private, public = directory / f"{name}.key", directory / f"{name}.pub"
    subprocess.run(["openssl", "genpkey", *genpkey, "-out", str(private)], check=True, capture_output=True)
    subprocess.run(["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)], check=True)
    return private, public
