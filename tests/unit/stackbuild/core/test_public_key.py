"""A signature policy's public key: the keys cosign and OpenSSL make are read as what they are; what is not a
public key cosign verifies with is refused with one line naming the file.

The keys come from the tools themselves (cosign generate-key-pair, openssl genpkey), never from our code; the
kinds expected are the algorithms asked of them.
"""

from __future__ import annotations

import base64

import pytest
from key_pairs import cosign_pair, der_sha256, openssl_pair

from stackbuild.core.errors import PublicKeyInvalid
from stackbuild.core.public_key import read_public_key


def test_cosigns_own_key_pair(cosign, tmp_path):
    private, public = cosign_pair(cosign, tmp_path)
    key = read_public_key(public, "--signature-key")
    assert key.kind == "ECDSA P-256"  # cosign generate-key-pair's curve
    assert key.pem == public.read_text()  # the one block, as written
    assert key.fingerprint == der_sha256(public)
    assert key.describe == f"ECDSA P-256 key sha256:{der_sha256(public)[:16]}"
    with pytest.raises(PublicKeyInvalid) as refused:
        read_public_key(private, "--signature-key")
    assert str(refused.value) == (
        f"--signature-key {private}: holds a private key (ENCRYPTED SIGSTORE PRIVATE KEY); give the public key "
        "(cosign.pub)"
    )


@pytest.mark.parametrize(
    ("name", "genpkey", "kind"),
    [
        ("p384", ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"), "ECDSA P-384"),
        ("p521", ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-521"), "ECDSA P-521"),
        ("rsa", ("-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"), "RSA"),
        ("ed25519", ("-algorithm", "ED25519"), "Ed25519"),
    ],
)
def test_openssl_keys_of_the_kinds_cosign_verifies_with(tmp_path, name, genpkey, kind):
    _private, public = openssl_pair(tmp_path, name, *genpkey)
    key = read_public_key(public, "--signature-key")
    assert (key.kind, key.fingerprint) == (kind, der_sha256(public))


@pytest.mark.parametrize(
    ("name", "genpkey", "why"),
    [
        (
            "k1",
            ("-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:secp256k1"),
            "an ECDSA key on secp256k1, a curve cosign does not use",
        ),
        ("x25519", ("-algorithm", "X25519"), "algorithm X25519 is none cosign verifies with"),
    ],
)
def test_keys_cosign_does_not_verify_with_are_refused(tmp_path, name, genpkey, why):
    _private, public = openssl_pair(tmp_path, name, *genpkey)
    with pytest.raises(PublicKeyInvalid, match=why):
        read_public_key(public, "--signature-key")


def test_what_is_not_one_public_key_is_refused_naming_the_file(tmp_path):
    _private, good = openssl_pair(tmp_path, "p256", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
    pem = good.read_text()
    body = "".join(pem.splitlines()[1:-1])
    der = base64.b64decode(body)
    cases = {
        "absent.pub": (None, "cannot read the public key (No such file or directory)"),
        "empty.pub": ("", "no PEM block"),
        "two.pub": (pem + pem, "expected one PUBLIC KEY block, found PUBLIC KEY, PUBLIC KEY"),
        "cert.pub": (pem.replace("PUBLIC KEY", "CERTIFICATE"), "expected one PUBLIC KEY block, found CERTIFICATE"),
        "base64.pub": (pem.replace(body[:8], "!!!!!!!!"), "not a public key cosign verifies with"),
        "short.pub": (
            "-----BEGIN PUBLIC KEY-----\n" + base64.b64encode(der[:-5]).decode() + "\n-----END PUBLIC KEY-----\n",
            "not a public key cosign verifies with: the DER is not a SubjectPublicKeyInfo",
        ),
        "binary.pub": (None, "not ASCII text"),
    }
    for name, (text, why) in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        elif name == "binary.pub":
            path.write_bytes(b"\xff\xfe" + der)
        with pytest.raises(PublicKeyInvalid) as refused:
            read_public_key(path, "--signature-key")
        line = str(refused.value)
        assert line.startswith(f"--signature-key {path}: ") and why in line and "\n" not in line, line
