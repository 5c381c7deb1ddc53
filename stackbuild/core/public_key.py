"""A cosign public key file read and checked: one PEM ``PUBLIC KEY`` block holding a DER SubjectPublicKeyInfo
(RFC 5280) of a key kind cosign verifies with: ECDSA on P-256/P-384/P-521 (``cosign generate-key-pair``
makes P-256), RSA or Ed25519.

:func:`read_public_key` (a file; :func:`public_key_of`: text already read) returns the PEM text (what a
signature policy inlines) and the key's kind, or raises :class:`PublicKeyInvalid` with one line naming the
file and what is wrong (a private key, no PEM block, another algorithm, DER that does not parse). The DER
is read here, by the few rules a SubjectPublicKeyInfo needs (definite lengths, the algorithm's OID, a BIT
STRING); nothing of the key is verified beyond its form.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from stackbuild.core.errors import PublicKeyInvalid

PEM_RE = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.DOTALL)
PUBLIC_KEY_LABEL = "PUBLIC KEY"
EC_PUBLIC_KEY = "1.2.840.10045.2.1"
# The curves cosign's ECDSA keys use, and each one's field size in bytes.
EC_CURVES = {"1.2.840.10045.3.1.7": ("P-256", 32), "1.3.132.0.34": ("P-384", 48), "1.3.132.0.35": ("P-521", 66)}
RSA = "1.2.840.113549.1.1.1"
ED25519 = "1.3.101.112"
SEQUENCE, BIT_STRING, OID, NULL = 0x30, 0x03, 0x06, 0x05


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


def _tlv(data: bytes, at: int) -> tuple[int, bytes, int]:
    """(tag, value, the offset after it) of the DER element at ``at``; ValueError when it does not parse."""
    if at + 2 > len(data):
        raise ValueError("truncated")
    tag, length, at = data[at], data[at + 1], at + 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or at + count > len(data):
            raise ValueError("bad length")
        length, at = int.from_bytes(data[at : at + count], "big"), at + count
    if at + length > len(data):
        raise ValueError("truncated")
    return tag, data[at : at + length], at + length


def _oid(value: bytes) -> str:
    if not value:
        raise ValueError("empty OID")
    parts, number = [value[0] // 40, value[0] % 40], 0
    for byte in value[1:]:
        number = (number << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(number)
            number = 0
    return ".".join(str(p) for p in parts)


def key_kind(der: bytes) -> str:
    """The key's kind from its SubjectPublicKeyInfo; ValueError naming what does not fit."""
    tag, info, end = _tlv(der, 0)
    if tag != SEQUENCE or end != len(der):
        raise ValueError("not one DER SEQUENCE")
    tag, algorithm, at = _tlv(info, 0)
    tag_key, key, end = _tlv(info, at)
    if tag != SEQUENCE or tag_key != BIT_STRING or end != len(info) or not key or key[0] != 0:
        raise ValueError("not a SubjectPublicKeyInfo (algorithm, BIT STRING)")
    tag, oid, at = _tlv(algorithm, 0)
    if tag != OID:
        raise ValueError("no algorithm OID")
    name = _oid(oid)
    if name == EC_PUBLIC_KEY:
        tag, curve, _ = _tlv(algorithm, at)
        if tag != OID or _oid(curve) not in EC_CURVES:
            raise ValueError("an ECDSA key on a curve cosign does not use (P-256, P-384, P-521)")
        label, size = EC_CURVES[_oid(curve)]
        point = key[1:]
        if not (point[:1] == b"\x04" and len(point) == 1 + 2 * size) and not (
            point[:1] in (b"\x02", b"\x03") and len(point) == 1 + size
        ):
            raise ValueError(f"the {label} point is not {1 + 2 * size} (or {1 + size} compressed) bytes")
        return f"ECDSA {label}"
    if name == RSA:
        return "RSA"
    if name == ED25519:
        if len(key) != 33:
            raise ValueError("an Ed25519 key is not 32 bytes")
        return "Ed25519"
    raise ValueError(f"algorithm {name} is none cosign verifies with (ECDSA, RSA, Ed25519)")


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
