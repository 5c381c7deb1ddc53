"""Key pairs the tools themselves make, for the tests of what reads public keys: cosign's own
(`cosign generate-key-pair`: ECDSA P-256, the private key encrypted) and OpenSSL's (`openssl genpkey`), and
the key's fingerprint as OpenSSL derives it."""

from __future__ import annotations

import hashlib
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


def der_sha256(public: Path) -> str:
    """The sha256 (hex) of the public key's DER SubjectPublicKeyInfo, as OpenSSL writes the DER."""
    der = subprocess.run(
        ["openssl", "pkey", "-pubin", "-in", str(public), "-outform", "DER"], check=True, capture_output=True
    ).stdout
    return hashlib.sha256(der).hexdigest()
