"""`compose --signature-key` (or ``--signature-identity`` + ``--signature-issuer``): the compose file carries
what its image's signature must verify with, and `build.py up` checks it before `docker compose up`.

The file gets a top-level extension, ``x-signature-policy`` (Compose ignores ``x-`` keys): the public key's
PEM (or the keyless identity and issuer) and the attestation predicate types that must be signed too. Its
service gets the label ``io.github.glm53.signature.verified`` from ``$STACKBUILD_SIGNATURE_VERIFIED``, which
`build.py up` sets to what it checked (the digest and the key or identity); started any other way, the
container says ``unverified``. :func:`read_signed_file` reads a file back for `build.py up`: the trust and
the images its services name, each pinned by digest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from stackbuild.core.errors import PublicKeyInvalid, UsageError
from stackbuild.core.labels import SIGNATURE_VERIFIED
from stackbuild.core.public_key import public_key_of
from stackbuild.core.reference import ImageReference
from stackbuild.serve.signature_trust import SignatureTrust

EXTENSION = "x-signature-policy"
VERIFIED_VARIABLE = "STACKBUILD_SIGNATURE_VERIFIED"
UNVERIFIED = "unverified"
VERIFIED_LABEL_VALUE = "${" + VERIFIED_VARIABLE + ":-" + UNVERIFIED + "}"


def extension(trust: SignatureTrust) -> dict:
    """The ``x-signature-policy`` mapping."""
    if trust.key is not None:
        ways = {"key": trust.key.pem}
    else:
        ways = {"identity": trust.identity, "issuer": trust.issuer}
    return {**ways, "attestations": list(trust.attestations)}


def labels(trust: SignatureTrust) -> dict:
    """The service's label that records what `build.py up` verified."""
    return {SIGNATURE_VERIFIED: VERIFIED_LABEL_VALUE}


def header_lines(trust: SignatureTrust) -> tuple[str, ...]:
    """The header's lines under its Start line (which names `build.py up`: compose_header.signed)."""
    return (
        f"#   Signed image required ({trust.describe}): `build.py up` checks the image's signature and its",
        "#   signed SBOM and provenance with cosign (x-signature-policy below), then runs docker compose up -d;",
        f"#   started otherwise, the container's {SIGNATURE_VERIFIED} label says {UNVERIFIED}.",
    )


@dataclass(frozen=True)
class SignedFile:
    """A compose file read back for `build.py up`: what to trust, and the images its services name."""

    path: Path
    trust: SignatureTrust
    images: tuple[ImageReference, ...]


def _trust(path: Path, policy: object) -> SignatureTrust:
    where = f"{path}: {EXTENSION}"
    if not isinstance(policy, dict):
        raise UsageError(f"{where}: not a mapping")
    attestations = policy.get("attestations")
    if not isinstance(attestations, list) or not all(isinstance(a, str) for a in attestations):
        raise UsageError(f"{where}.attestations: not a list of predicate types")
    key = policy.get("key")
    if key is not None:
        if not isinstance(key, str):
            raise PublicKeyInvalid(f"{where}.key: not a PEM text")
        return SignatureTrust(key=public_key_of(key, path, f"{where}.key"), attestations=tuple(attestations))
    identity, issuer = policy.get("identity"), policy.get("issuer")
    if not (isinstance(identity, str) and identity and isinstance(issuer, str) and issuer):
        raise UsageError(f"{where}: neither a key nor an identity and issuer")
    return SignatureTrust(identity=identity, issuer=issuer, attestations=tuple(attestations))


def read_signed_file(path: Path) -> SignedFile:
    """The trust and the pinned images of a compose file `compose --signature-key` wrote; UsageError (one line)
    for a file without the extension, or a service whose image is not pinned by digest."""
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UsageError(f"-f {path}: cannot read a compose file: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(document, dict) or EXTENSION not in document:
        raise UsageError(
            f"-f {path}: no {EXTENSION} in the file: `build.py compose --signature-key PUB` (or --signature-identity "
            "and --signature-issuer) writes one"
        )
    trust = _trust(Path(path), document[EXTENSION])
    images = []
    for name, service in (document.get("services") or {}).items():
        text = (service or {}).get("image")
        reference = ImageReference.parse(text) if isinstance(text, str) and "$" not in text else None
        if reference is None or reference.digest is None:
            raise UsageError(f"-f {path}: service {name}'s image {text!r} is not pinned by digest")
        images.append(reference)
    if not images:
        raise UsageError(f"-f {path}: no service names an image")
    return SignedFile(Path(path), trust, tuple(dict.fromkeys(images)))
