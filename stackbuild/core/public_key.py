"""A cosign public key file read and checked: one PEM ``PUBLIC KEY`` block holding a DER SubjectPublicKeyInfo
(RFC 5280) of a key kind cosign verifies with: ECDSA on P-256/P-384/P-521 (``cosign generate-key-pair``
makes P-256), RSA or Ed25519.

:func:`read_public_key` (a file; :func:`public_key_of`: text already read) returns the PEM text (what a
signature policy inlines) and the key's kind, or raises :class:`PublicKeyInvalid` with one line naming the
file and what is wrong (a private key, no PEM block, another algorithm, DER that does not parse). The key
is parsed by the ``cryptography`` library; nothing of it is verified beyond its form.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_der_public_key

from stackbuild.core.errors import PublicKeyInvalid

PEM_RE = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.DOTALL)
PUBLIC_KEY_LABEL = "PUBLIC KEY"
# The curves cosign's ECDSA keys use, by the library's name for each.
EC_CURVES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}


@dataclass(frozen=True)
class PublicKey:
    path: Path
    pem: str  # the one PEM block, as read (armour lines included, ending in a newline)
    kind: str  # "ECDSA P-256", "RSA", "Ed25519"
    fingerprint: str  # sha256 of the DER SubjectPublicKeyInfo, hex (`openssl pkey -pubin -outform DER | sha256sum`)

    @property
    def describe(self) -> str:
        """The key where it is named (messages, headers, labels): its kind and fingerprint, never a path."""
        return f"{self.kind} key sha256:{self.fingerprint[:16]}"


def key_kind(der: bytes) -> str:
    """The key's kind from its SubjectPublicKeyInfo; ValueError naming what does not fit."""
    try:
        key = load_der_public_key(der)
    except UnsupportedAlgorithm as exc:
        raise ValueError(f"an algorithm cosign does not verify with (ECDSA, RSA, Ed25519): {exc}") from None
    except ValueError:
        raise ValueError("the DER is not a SubjectPublicKeyInfo") from None
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name not in EC_CURVES:
            raise ValueError(f"an ECDSA key on {key.curve.name}, a curve cosign does not use (P-256, P-384, P-521)")
        return f"ECDSA {EC_CURVES[key.curve.name]}"
    if isinstance(key, rsa.RSAPublicKey):
        return "RSA"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return "Ed25519"
    algorithm = type(key).__name__.lstrip("_").removesuffix("PublicKey")
    raise ValueError(f"algorithm {algorithm} is none cosign verifies with (ECDSA, RSA, Ed25519)")


def read_public_key(path: Path, flag: str) -> PublicKey:
    """The PEM public key in ``path``; PublicKeyInvalid (one line naming ``flag`` and the file) otherwise."""
    where = f"{flag} {path}"
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not ASCII text"
        raise PublicKeyInvalid(f"{where}: cannot read the public key ({reason})") from None
    return public_key_of(text, Path(path), where)


def public_key_of(text: str, path: Path, where: str) -> PublicKey:
    """The PEM public key ``text`` (read from ``path``); PublicKeyInvalid naming ``where`` otherwise."""
    blocks = PEM_RE.findall(text)
    if not blocks:
        raise PublicKeyInvalid(f"{where}: no PEM block (-----BEGIN PUBLIC KEY-----) in the file")
    labels = [label for label, _ in blocks]
    if any("PRIVATE" in label for label in labels):
        raise PublicKeyInvalid(f"{where}: holds a private key ({labels[0]}); give the public key (cosign.pub)")
    if labels != [PUBLIC_KEY_LABEL]:
        raise PublicKeyInvalid(f"{where}: expected one PUBLIC KEY block, found {', '.join(labels)}")
    try:
        der = base64.b64decode("".join(blocks[0][1].split()), validate=True)
        kind = key_kind(der)
    except (binascii.Error, ValueError) as exc:
        raise PublicKeyInvalid(f"{where}: not a public key cosign verifies with: {exc}") from None
    match = PEM_RE.search(text)
    assert match is not None
    return PublicKey(path, match.group(0) + "\n", kind, hashlib.sha256(der).hexdigest())
